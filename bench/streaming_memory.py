"""Peak memory of streamed training as the corpus grows 10x (150k -> 1.5M MOSES lines).

Writes two gzipped shard sets from the MOSES train split, then runs
``seqvae train SHARDS --stream --max-steps N`` on each in a fresh process and prints the peak
resident memory (ru_maxrss of the child) and the time of each run, and their ratio.

    python bench/streaming_memory.py [--steps 30]
"""

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import time

from seqvae.data.sources import read_sequences


def write_shards(folder: str, lines: list[str], shards: int = 4) -> str:
    os.makedirs(folder, exist_ok=True)
    for i in range(shards):
        with gzip.open(os.path.join(folder, f"part{i}.smi.gz"), "wt") as out:
            out.write("\n".join(lines[i::shards]) + "\n")
    return os.path.join(folder, "part*.smi.gz")


def peak_rss_mib(command: list[str]) -> tuple[float, float]:
    """Runs a command in a child process; its peak RSS (MiB) and wall time (s)."""
    started = time.monotonic()
    script = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
              "stdout=subprocess.DEVNULL); "
              "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", script, *command], check=True,
                         capture_output=True, text=True).stdout
    return int(out.strip().splitlines()[-1]) / 1024, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    lines = read_sequences("moses:train").texts
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for size in (150_000, 1_500_000):
            pattern = write_shards(os.path.join(tmp, str(size)), lines[:size])
            command = [sys.executable, "-m", "seqvae", "train", pattern, "--stream",
                       "--out", os.path.join(tmp, f"run{size}"), "--max-steps", str(args.steps),
                       "--set", "train.export_at_end=false", "--set", "train.batch_size=128"]
            results[size] = peak_rss_mib(command)
            print(f"{size:>9,} lines: peak RSS {results[size][0]:8.1f} MiB, {results[size][1]:6.1f} s")
        ratio = results[1_500_000][0] / results[150_000][0]
        print(f"peak memory 1.5M / 150k lines: {ratio:.3f}")


if __name__ == "__main__":
    main()
