"""Where seqvae training's system CPU time goes: user/sys time, page faults and mol/s per allocator.

    flock /tmp/seqvae-bench.lock python bench/kernel_time.py                 # demo model, 150 steps
    flock /tmp/seqvae-bench.lock python bench/kernel_time.py --steps 2000 --limit -1  # the demo

Each configuration is one whole ``seqvae train --preset demo`` process (data preparation, tracing
and training, as a user runs it), measured with ``wait4``: user and system CPU seconds, minor page
faults (each one a 4 KiB page the kernel maps and zeroes), context switches and peak memory; the
training rate comes from the run's ``metrics.jsonl``, after the first logged step (tracing
excluded). Configurations run in turns, A B A B ..., so load changes fall on each alike:

- ``glibc malloc``: TensorFlow's default CPU allocator (``TF_CPU_ALLOCATOR_USE_BFC=false``),
  glibc as it comes (``SEQVAE_MALLOPT=0``);
- ``TF BFC``: TensorFlow's BFC allocator (``TF_CPU_ALLOCATOR_USE_BFC=true``), glibc as it comes;
- ``mallopt + TF BFC``: seqvae's default: BFC, and glibc told at import to keep freed heap memory
  (Eigen's matmul buffers, which BFC does not serve; ``seqvae/runtime.py``);
- ``tcmalloc`` / ``jemalloc``: preloaded over glibc (the allocator TensorFlow's performance guide
  suggests), where ``libtcmalloc_minimal.so.4`` / ``libjemalloc.so.2`` are installed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)  # throughput.cpu_description


def _library(name: str) -> str | None:
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in listing.splitlines():
        if name in line and "=>" in line:
            return line.split("=>")[1].strip()
    return None


def configurations() -> list[tuple[str, dict]]:
    """(label, environment changes) of each allocator that can run here."""
    glibc_as_is = {"SEQVAE_MALLOPT": "0"}
    configs = [("glibc malloc (TF default)", {"TF_CPU_ALLOCATOR_USE_BFC": "false", **glibc_as_is}),
               ("TF BFC, glibc as is", {"TF_CPU_ALLOCATOR_USE_BFC": "true", **glibc_as_is}),
               ("mallopt + TF BFC (seqvae default)", {"TF_CPU_ALLOCATOR_USE_BFC": "true"})]
    for label, library in (("tcmalloc", "libtcmalloc_minimal.so.4"), ("jemalloc", "libjemalloc.so.2")):
        path = _library(library)
        if path:
            configs.append((f"{label} (LD_PRELOAD)", {"TF_CPU_ALLOCATOR_USE_BFC": "false",
                                                      "LD_PRELOAD": path, **glibc_as_is}))
    return configs


def train_once(env_changes: dict, out: str, args) -> dict:
    """One ``seqvae train`` process: its rusage and its rate after the first logged step."""
    command = [sys.executable, "-m", "seqvae", "train", "--preset", "demo", "--out", out,
               "--max-steps", str(args.steps), "--set", "train.export_at_end=false"]
    if args.limit >= 0:
        command += ["--limit", str(args.limit)]
    env = {**os.environ, **env_changes, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    started = time.perf_counter()
    with open(out + ".log", "w") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status):
        with open(out + ".log") as log:
            raise SystemExit(f"{' '.join(command)} failed:\n{log.read()[-2000:]}")
    with open(os.path.join(out, "config.json")) as handle:
        batch = json.load(handle)["train"]["batch_size"]
    with open(os.path.join(out, "metrics.jsonl")) as handle:
        steps = [r for r in map(json.loads, handle) if r.get("kind") == "step"]
    first, last = steps[0], steps[-1]
    rate = (last["step"] - first["step"]) * batch / max(last["train_s"] - first["train_s"], 1e-9)
    return {"wall": wall, "user": usage.ru_utime, "sys": usage.ru_stime,
            "minor_faults": usage.ru_minflt, "major_faults": usage.ru_majflt,
            "voluntary_switches": usage.ru_nvcsw, "involuntary_switches": usage.ru_nivcsw,
            "peak_mib": usage.ru_maxrss / 1024, "mol_per_s": rate,
            "timed_steps": last["step"] - first["step"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="training steps per process")
    parser.add_argument("--limit", type=int, default=20000,
                        help="molecules of MOSES train to prepare (-1: the demo's own)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds over the configurations")
    parser.add_argument("--only", help="comma-separated labels' first words (glibc,TF,mallopt,tcmalloc,...)")
    parser.add_argument("--output", help="also write the results as JSON here")
    args = parser.parse_args()

    configs = configurations()
    if args.only:
        wanted = set(args.only.split(","))
        configs = [c for c in configs if c[0].split()[0] in wanted]
    folder = tempfile.mkdtemp(prefix="seqvae-kernel-time-")
    load = os.getloadavg()[0]
    results: dict[str, list[dict]] = {label: [] for label, _ in configs}
    try:
        for repeat in range(args.repeats):
            for index, (label, changes) in enumerate(configs):
                out = os.path.join(folder, f"run{index}-{repeat}")
                results[label].append(train_once(changes, out, args))
                done = results[label][-1]
                print(f"kernel_time: {label} round {repeat + 1}: user {done['user']:.1f} s, sys "
                      f"{done['sys']:.1f} s, {done['mol_per_s']:.1f} mol/s", file=sys.stderr,
                      flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    from throughput import cpu_description  # imports TensorFlow: after the runs

    print(f"CPU: {cpu_description()}")
    limit = f" --limit {args.limit}" if args.limit >= 0 else ""
    print(f"seqvae train --preset demo{limit} --max-steps {args.steps}, "
          f"{args.repeats} round(s); load average (1 min) {load:.2f} at start, "
          f"{os.getloadavg()[0]:.2f} at the end")
    print("\n| allocator | wall s | user s | sys s | sys share of CPU | minor page faults | "
          "train mol/s | peak MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, runs in results.items():
        def median(key: str) -> float:
            return statistics.median(r[key] for r in runs)
        share = median("sys") / (median("user") + median("sys"))
        print(f"| {label} | {median('wall'):.1f} | {median('user'):.1f} | {median('sys'):.1f} | "
              f"{share:.1%} | {median('minor_faults'):,.0f} | {median('mol_per_s'):.1f} | "
              f"{median('peak_mib'):.0f} |")
    if args.output:
        with open(args.output, "w") as handle:
            json.dump({"cpu": cpu_description(), "args": vars(args), "results": results}, handle,
                      indent=1)


if __name__ == "__main__":
    main()
