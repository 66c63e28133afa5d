"""seqvae's MOSES metrics against MOSES's own ``get_all_metrics`` on the same samples: time and agreement.

    flock /tmp/seqvae-bench.lock python bench/evaluate_speed.py --run runs/demo -n 10000
    flock /tmp/seqvae-bench.lock python bench/evaluate_speed.py --samples samples.smi

Samples ``-n`` molecules from the run's prior (not timed; or reads ``--samples``), then times, each
in a fresh process on the same file, with MOSES's default references (test, test_scaffolds, train):

- ``seqvae first``: ``moses_metrics.moses_metrics`` with an empty reference cache (a folder under
  the output directory), so the statistics of the MOSES splits are computed and stored (or with
  ``--cache-dir``, a cache as it is, e.g. the one ``seqvae evaluate`` filled);
- ``seqvae cached``: the same again, the statistics loaded from that cache;
- ``MOSES``: ``moses.get_all_metrics`` in the peer venv (``bench/moses_peer/setup.sh``), which
  reads the statistics MOSES ships precomputed; called twice in one process (its first call also
  loads torch and ChemNet).

Every shared metric is compared (tolerance 1e-6 absolute). MOSES's peer stack has another RDKit
than seqvae's (``versions`` in the output), so a difference can also come from RDKit.
Prints a markdown table and writes ``evaluate_speed.json`` to ``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

from machine import cpu_model  # noqa: E402
from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PEER_PYTHON = os.path.join(HERE, "moses_peer", ".venv", "bin", "python")
TOLERANCE = 1e-6




# --- the two workers: each runs in its own process and prints one JSON line ------------------------


def seqvae_worker(samples_path: str, include_fcd: bool) -> dict:
    import warnings

    from seqvae.evaluation import moses_metrics

    with open(samples_path) as handle:
        samples = handle.read().split("\n")[:-1]
    started, cpu = time.perf_counter(), os.times()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = moses_metrics.moses_metrics(samples, include_fcd=include_fcd)
    ended = os.times()
    import rdkit

    return {"seconds": time.perf_counter() - started, "metrics": values,
            "user": ended.user - cpu.user + ended.children_user - cpu.children_user,
            "sys": ended.system - cpu.system + ended.children_system - cpu.children_system,
            "rdkit": rdkit.__version__}


def moses_worker(samples_path: str, include_fcd: bool, n_jobs: int) -> dict:
    import warnings

    warnings.simplefilter("ignore")
    import moses
    import rdkit
    from rdkit import RDLogger

    RDLogger.DisableLog("rdApp.*")
    with open(samples_path) as handle:
        samples = handle.read().split("\n")[:-1]
    calls = []
    for _ in range(2):
        started = time.perf_counter()
        values = moses.get_all_metrics(samples, n_jobs=n_jobs, device="cpu", batch_size=512)
        calls.append(time.perf_counter() - started)
    if not include_fcd:
        values = {k: v for k, v in values.items() if not k.startswith("FCD/")}
    return {"seconds": calls, "metrics": {k: float(v) for k, v in values.items()},
            "rdkit": rdkit.__version__, "n_jobs": n_jobs}


def _run_worker(python: str, arguments: list[str], env: dict) -> dict:
    command = [python, os.path.abspath(__file__), *arguments]
    print("+", " ".join(command), file=sys.stderr, flush=True)
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the comparison ----------------------------------------------------------------------------


def _samples(args) -> str:
    if args.samples:
        return os.path.abspath(args.samples)
    from seqvae import inference
    from seqvae.run import load_run

    path = os.path.join(args.output_dir, "samples.smi")
    started = time.perf_counter()
    samples = inference.sample(load_run(args.run), args.n, seed=args.seed)
    with open(path, "w") as handle:
        handle.write("".join(f"{s}\n" for s in samples))
    print(f"sampled {len(samples)} molecules in {time.perf_counter() - started:.1f} s (not timed "
          f"below) -> {path}", file=sys.stderr)
    return path


def _agreement(ours: dict, theirs: dict) -> list[tuple[str, float | None, float, str]]:
    rows = []
    for name, their_value in theirs.items():
        our_value = ours.get(name)
        if our_value is None or (isinstance(our_value, float) and math.isnan(our_value)):
            rows.append((name, our_value, their_value, "missing"))
            continue
        difference = abs(our_value - their_value)
        rows.append((name, our_value, their_value,
                     "yes" if difference <= TOLERANCE else f"no ({difference:.2g})"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--run", help="run directory to sample from")
    source.add_argument("--samples", help="a file of SMILES, one a line, instead of sampling")
    parser.add_argument("-n", type=int, default=10000, help="molecules to sample (default 10000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-fcd", action="store_true", help="leave FCD out on both sides")
    parser.add_argument("--moses-jobs", type=int, default=os.cpu_count() or 1,
                        help="get_all_metrics n_jobs (default: every core, as seqvae uses)")
    parser.add_argument("--output-dir", default="bench/evaluate_speed_out")
    parser.add_argument("--cache-dir", help="use this reference cache as it is (e.g. the one "
                        "seqvae evaluate filled) instead of a new, empty one: the first call is "
                        "then timed with whatever the cache holds")
    parser.add_argument("--worker", choices=("seqvae", "moses"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker == "seqvae":
        print(json.dumps(seqvae_worker(args.samples, not args.no_fcd), allow_nan=True))
        return
    if args.worker == "moses":
        print(json.dumps(moses_worker(args.samples, not args.no_fcd, args.moses_jobs)))
        return
    if not (args.run or args.samples):
        parser.error("give --run or --samples")
    if not os.path.exists(PEER_PYTHON):
        parser.error(f"no MOSES peer venv at {PEER_PYTHON}: run bash bench/moses_peer/setup.sh")
    os.makedirs(args.output_dir, exist_ok=True)
    samples = _samples(args)
    if args.cache_dir:
        cache = os.path.abspath(args.cache_dir)
        first_label = f"seqvae, first call (given cache {args.cache_dir})"
    else:
        cache = os.path.abspath(os.path.join(args.output_dir, "reference_cache"))
        first_label = "seqvae, first call (fills the cache)"
        if os.path.exists(cache):
            import shutil

            shutil.rmtree(cache)
    env = {**os.environ, "SEQVAE_CACHE_DIR": cache,
           "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    worker = ["--samples", samples] + (["--no-fcd"] if args.no_fcd else [])
    first = _run_worker(sys.executable, ["--worker", "seqvae", *worker], env)
    cached = _run_worker(sys.executable, ["--worker", "seqvae", *worker], env)
    peer_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    theirs = _run_worker(PEER_PYTHON, ["--worker", "moses", "--moses-jobs",
                                       str(args.moses_jobs), *worker], peer_env)

    rows = _agreement(cached["metrics"], theirs["metrics"])
    with open(samples) as handle:
        count = sum(1 for _ in handle)
    lines = [
        f"{count} samples ({samples}); CPU: {cpu_model()}, {os.cpu_count()} logical cores; "
        f"seqvae RDKit {cached['rdkit']}, MOSES peer RDKit {theirs['rdkit']}; "
        f"FCD {'excluded' if args.no_fcd else 'included'}",
        "",
        "| call | wall s | vs MOSES 2nd call |",
        "|---|---:|---:|",
    ]
    moses_second = theirs["seconds"][1]
    for name, seconds in ((first_label, first["seconds"]),
                          ("seqvae, cached call", cached["seconds"]),
                          (f"MOSES get_all_metrics, 1st call (n_jobs={args.moses_jobs})",
                           theirs["seconds"][0]),
                          (f"MOSES get_all_metrics, 2nd call (n_jobs={args.moses_jobs})",
                           moses_second)):
        lines.append(f"| {name} | {seconds:.1f} | {moses_second / seconds:.2f}x |")
    lines += ["", "| metric | seqvae | MOSES | equal to 1e-6 |", "|---|---:|---:|---|"]
    for name, ours, their_value, agrees in rows:
        shown = "n/a" if ours is None else f"{ours:.8g}"
        lines.append(f"| {name} | {shown} | {their_value:.8g} | {agrees} |")
    agreeing = sum(agrees == "yes" for *_, agrees in rows)
    lines += ["", f"{agreeing} of {len(rows)} metrics equal to {TOLERANCE:g}"]
    print("\n".join(lines))
    with open(os.path.join(args.output_dir, "evaluate_speed.json"), "w") as handle:
        json.dump({"samples": samples, "first": first, "cached": cached, "moses": theirs,
                   "cpu": cpu_model(), "table": lines}, handle, indent=1)


if __name__ == "__main__":
    main()
