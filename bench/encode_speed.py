"""``seqvae encode`` against the MOSES VAE's encoder on the same molecules, and its memory by input size.

    flock /tmp/seqvae-bench.lock python bench/encode_speed.py --run runs/demo
    flock /tmp/seqvae-bench.lock python bench/encode_speed.py --run runs/demo --small 150000 --large 1500000
    flock /tmp/seqvae-bench.lock python bench/encode_speed.py --matmul-only   # the arithmetic ceiling
    flock /tmp/seqvae-bench.lock python bench/encode_speed.py --rdkit-only    # RDKit's ceiling

1. Speed: writes ``--data`` (default: the 176,074 MOSES test molecules) to a ``.smi`` file, runs
   ``seqvae encode RUN FILE --out z.npy``, then the same with a run of MOSES's own architecture
   (``--preset moses_original``: a one-directional GRU-256 encoder on aromatic SMILES, like
   MOSES's; trained one step in ``--output-dir``, the weights do not change the cost) and, in the
   MOSES peer venv (``bench/moses_peer/setup.sh``),
   MOSES's own ``VAE.forward_encoder`` (default ``moses.vae`` config, untrained: the weights do
   not change the cost) over the same file in MOSES's way: batches of 512, each sorted by length
   for ``pack_sequence``, ``string2tensor`` per molecule, ``torch.no_grad``; with one torch thread
   and with one per core (on a busy machine OpenMP's spinning threads can be 30x slower).
   Rates count encoding only (model loading excluded on both sides); the seqvae command's whole
   wall time is shown too. Then what RDKit's share of the command costs on the same molecules
   (the validity check of an aromatic run, the check and Kekule conversion of a Kekule run such
   as the demo's) as the rate no ``seqvae encode`` can pass on this machine's cores.
2. Memory: ``seqvae encode`` (the MOSES-architecture run, the faster of the two) on the first
   ``--small`` and ``--large`` lines of MOSES's train split; peak resident memory of each process
   (``wait4``), which must not grow with the input.

Prints markdown tables and writes ``encode_speed.json`` to ``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PEER_PYTHON = os.path.join(HERE, "moses_peer", ".venv", "bin", "python")


def moses_worker(path: str, batch_size: int, threads: int) -> dict:
    """MOSES's encoder over a file of SMILES; runs in the peer venv (never imports seqvae)."""
    import warnings

    warnings.simplefilter("ignore")
    import importlib.util

    import moses
    import torch
    from moses.utils import OneHotVocab

    def module(name: str, relative: str):  # moses/vae/__init__ imports the trainer (tqdm)
        spec = importlib.util.spec_from_file_location(
            name, os.path.join(os.path.dirname(moses.__file__), relative))
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        return loaded

    VAE = module("moses_vae_model", "vae/model.py").VAE
    get_parser = module("moses_vae_config", "vae/config.py").get_parser

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    with open(path) as handle:
        texts = handle.read().split()
    model = VAE(OneHotVocab.from_data(texts), get_parser().parse_args([]))  # as its trainer
    model.eval()
    started = time.perf_counter()
    rows = 0
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            batch = sorted(texts[start:start + batch_size], key=len, reverse=True)
            z, _kl = model.forward_encoder([model.string2tensor(s, device="cpu") for s in batch])
            rows += len(z)
    seconds = time.perf_counter() - started
    return {"rows": rows, "seconds": seconds, "per_second": rows / seconds,
            "threads": torch.get_num_threads(), "torch": torch.__version__,
            "encoder": f"GRU {model.encoder_rnn.hidden_size}, "
                       f"{'bi' if model.encoder_rnn.bidirectional else 'uni'}directional, "
                       f"embedding {model.x_emb.embedding_dim}"}


def _peak_rss_run(command: list[str], env: dict) -> tuple[str, float, int]:
    """(stderr, wall seconds, peak resident KiB) of one process."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    stderr = process.stderr.read()
    _pid, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{stderr[-2000:]}")
    return stderr, time.perf_counter() - started, usage.ru_maxrss


def _seqvae_encode(run: str, data: str, out: str, env: dict) -> dict:
    command = [sys.executable, "-m", "seqvae", "encode", run, data, "--out", out]
    print("+", " ".join(command), file=sys.stderr, flush=True)
    stderr, wall, peak = _peak_rss_run(command, env)
    found = re.search(r"wrote z means \((\d+), \d+\).* in ([\d.]+) s \((\d+) mol/s\)", stderr)
    if not found:
        raise SystemExit(f"unexpected output of seqvae encode:\n{stderr[-2000:]}")
    return {"rows": int(found[1]), "seconds": float(found[2]), "per_second": float(found[3]),
            "wall": wall, "peak_mib": peak / 1024}


def _moses_architecture_run(run_dir: str, env: dict) -> str:
    """A seqvae run with MOSES's VAE architecture (one step of training: speed only)."""
    if not os.path.exists(os.path.join(run_dir, "run.json")):
        command = [sys.executable, "-m", "seqvae", "train", "moses:train", "--preset",
                   "moses_original", "--limit", "2000", "--max-steps", "1", "--out", run_dir,
                   "--set", "train.export_at_end=false"]
        print("+", " ".join(command), file=sys.stderr, flush=True)
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return run_dir


def matmul_rates() -> list[str]:
    """TensorFlow's float32 matmul GFLOP/s (best of 20) on a square and the GRU-256 encoder's
    per-step shapes: the arithmetic ceiling the encoder rows compare with."""
    import tensorflow as tf

    matmul, lines = tf.function(tf.matmul), []
    for m, k, n in ((2048, 2048, 2048), (1000, 256, 768), (4000, 256, 768)):
        a, b = tf.random.normal([m, k]), tf.random.normal([k, n])
        matmul(a, b).numpy()
        best = float("inf")
        for _ in range(20):
            started = time.perf_counter()
            matmul(a, b).numpy()
            best = min(best, time.perf_counter() - started)
        lines.append(f"float32 matmul {m}x{k} @ {k}x{n}: {2 * m * k * n / best / 1e9:.0f} GFLOP/s")
    return lines


def rdkit_ceilings(data: str, peer_rate: float = 0.0) -> list[str]:
    """What RDKit's share of ``seqvae encode`` costs on ``data`` (one core, timed once): the
    validity check of an aromatic run (``chemistry.invalid_smiles``) and the check-and-convert of
    a Kekule run (``chemistry.checked_kekule_smiles``), each with the mol/s ``seqvae encode``
    cannot pass on this machine's cores even if tokenizing and encoding cost nothing (with
    ``peer_rate``, MOSES's mol/s: that rate as a multiple of it)."""
    from seqvae.data import chemistry, sources

    texts = sources.read_sequences(data).texts
    cores = len(os.sched_getaffinity(0))
    lines = [f"{len(texts)} molecules from {data}, {cores} cores"]
    for what, job in (("validity check (aromatic runs)", chemistry.invalid_smiles),
                      ("check and Kekule conversion (Kekule runs, the demo)",
                       chemistry.checked_kekule_smiles)):
        started = time.process_time()
        job(texts)
        seconds = time.process_time() - started
        ceiling = len(texts) * cores / seconds
        lines.append(f"RDKit {what}: {seconds:.1f} core-s, so at most {ceiling:,.0f} mol/s on "
                     f"{cores} cores" + (f", {ceiling / peer_rate:.2f}x MOSES's encoder"
                                         if peer_rate else ""))
    return lines


def _write_lines(source: str, path: str, limit: int) -> int:
    from seqvae.data import sources

    written = 0
    with open(path, "w") as out:
        for seqs in sources.iter_sequences(source):
            for text in seqs.texts[:limit - written if limit else None]:
                out.write(text + "\n")
                written += 1
            if limit and written >= limit:
                break
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="trained run directory (required but for --matmul-only)")
    parser.add_argument("--data", default="moses:test", help="molecules for the speed rows")
    parser.add_argument("--small", type=int, default=150_000, help="lines of the small memory run")
    parser.add_argument("--large", type=int, default=1_500_000, help="lines of the large one")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--matmul-only", action="store_true",
                        help="print only TensorFlow's matmul rates (the arithmetic ceiling)")
    parser.add_argument("--rdkit-only", action="store_true",
                        help="print only what RDKit's check and Kekule conversion cost (a ceiling)")
    parser.add_argument("--output-dir", default="bench/encode_speed_out")
    parser.add_argument("--worker", choices=("moses",), help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, default=512, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "moses":
        print(json.dumps(moses_worker(args.data, args.batch_size, args.threads)))
        return

    if args.matmul_only:
        print("\n".join(matmul_rates()))
        return
    if args.rdkit_only:
        sys.path.insert(0, REPO)
        print("\n".join(rdkit_ceilings(args.data)))
        return
    if not args.run:
        parser.error("--run is required")
    sys.path.insert(0, REPO)
    os.makedirs(args.output_dir, exist_ok=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    data = os.path.abspath(os.path.join(args.output_dir, "molecules.smi"))
    count = _write_lines(args.data, data, 0)
    out = os.path.join(args.output_dir, "z.npy")
    ours = _seqvae_encode(args.run, data, out, env)
    same_arch = _moses_architecture_run(os.path.join(args.output_dir, "moses_arch_run"), env)
    ours_same = _seqvae_encode(same_arch, data, out, env)
    peer_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    moses_rows = []
    for threads in sorted({1, os.cpu_count() or 1}):
        command = [PEER_PYTHON, os.path.abspath(__file__), "--worker", "moses", "--run", args.run,
                   "--data", data, "--threads", str(threads)]
        print("+", " ".join(command), file=sys.stderr, flush=True)
        done = subprocess.run(command, env=peer_env, stdout=subprocess.PIPE, text=True, check=True)
        moses_rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    theirs = max(moses_rows, key=lambda row: row["per_second"])

    from seqvae.run import load_run

    def described(run_dir: str, result: dict) -> str:
        config = load_run(run_dir).config
        model = config.model
        return (f"| seqvae encode ({run_dir}: GRU {model.encoder_units}, "
                f"{'bi' if model.encoder_bidirectional else 'uni'}directional, one-hot, "
                f"{'Kekule' if config.data.kekulize else 'aromatic'} SMILES) | "
                f"{result['per_second']:.0f} | {result['seconds']:.1f} | {result['wall']:.1f} |")

    from throughput import cpu_description

    lines = [cpu_description(), f"{count} molecules from {args.data}", "",
             "| encoder | mol/s (reading, checking and encoding) | s | whole command s |",
             "|---|---:|---:|---:|", described(args.run, ours), described(same_arch, ours_same),
             *(f"| MOSES VAE forward_encoder ({row['encoder']}, torch {row['torch']}, "
               f"{row['threads']} threads) | {row['per_second']:.0f} | {row['seconds']:.1f} | |"
               for row in moses_rows),
             "", "seqvae / MOSES (its faster thread setting): "
                 f"{ours['per_second'] / theirs['per_second']:.2f}x ({args.run}), "
                 f"{ours_same['per_second'] / theirs['per_second']:.2f}x (MOSES's architecture)",
             "", *rdkit_ceilings(data, theirs["per_second"])]
    memory = {}
    if not args.skip_memory:
        lines += ["", f"seqvae encode {same_arch} on the first lines of moses:train:", "",
                  "| input lines | rows | mol/s | peak RSS MiB |", "|---:|---:|---:|---:|"]
        for size in (args.small, args.large):
            path = os.path.abspath(os.path.join(args.output_dir, f"train_{size}.smi"))
            _write_lines("moses:train", path, size)
            memory[size] = _seqvae_encode(same_arch, path, out, env)
            os.remove(path)
            lines.append(f"| {size} | {memory[size]['rows']} | {memory[size]['per_second']:.0f} | "
                         f"{memory[size]['peak_mib']:.0f} |")
        growth = memory[args.large]["peak_mib"] / memory[args.small]["peak_mib"] - 1
        lines += ["", f"peak memory, {args.large} lines vs {args.small}: {growth:+.1%}"]
    print("\n".join(lines))
    with open(os.path.join(args.output_dir, "encode_speed.json"), "w") as handle:
        json.dump({"seqvae": ours, "seqvae_moses_architecture": ours_same, "moses": moses_rows, "memory": memory, "table": lines}, handle,
                  indent=1)


if __name__ == "__main__":
    main()
