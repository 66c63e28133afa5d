"""MOSES's MCF/PAINS filters with and without the pattern-fingerprint screen: the same verdicts,
and how much faster.

    python bench/filter_screen.py runs/demo/report/samples.smi   # a run's evaluate samples
    python bench/filter_screen.py                                # both MOSES test splits

``seqvae.evaluation.molecules.passes_filters`` runs ``HasSubstructMatch`` only for the filter
patterns whose pattern fingerprint is contained in the molecule's (``_filter_candidates``). For
every molecule this checks, on all cores, that the screened set holds every pattern that matches
(so the verdict is the one of matching all 502 patterns), and prints both timings (CPU seconds
per molecule of the substructure step, the same molecules in the same run) and their ratio.
MOSES filtered its own data, so no molecule of its test splits matches a pattern: the check that
counts is on generated molecules, of which about one in eight matches.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up


def check_chunk(smiles: list[str]) -> dict:
    """For one chunk: molecules, those matching some pattern, screen misses, CPU seconds of the
    full and of the screened matching."""
    from rdkit import Chem, RDLogger

    from seqvae.evaluation import molecules

    RDLogger.DisableLog("rdApp.*")
    patterns = molecules.filter_patterns()
    molecules.filter_fingerprints()  # built outside the timing
    mols = [Chem.AddHs(m) for m in map(Chem.MolFromSmiles, smiles) if m is not None]
    started = time.process_time()
    full = [{i for i, p in enumerate(patterns) if m.HasSubstructMatch(p)} for m in mols]
    full_s = time.process_time() - started
    started = time.process_time()
    screened = [any(m.HasSubstructMatch(patterns[i]) for i in molecules.filter_candidates(m))
                for m in mols]
    screened_s = time.process_time() - started
    misses = sum(1 for m, matching in zip(mols, full)
                 if not matching <= set(molecules.filter_candidates(m).tolist()))
    disagree = sum(bool(matching) != verdict for matching, verdict in zip(full, screened))
    return {"molecules": len(mols), "matching": sum(bool(f) for f in full), "misses": misses,
            "disagree": disagree, "full_s": full_s, "screened_s": screened_s}


def main() -> int:
    from throughput import cpu_description  # bench/ is first on sys.path as a script

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="SMILES files (first column); default: MOSES "
                        "test and test_scaffolds")
    parser.add_argument("--limit", type=int, default=0, help="first N molecules of each source")
    args = parser.parse_args()

    from seqvae import parallel
    from seqvae.data.sources import read_sequences

    sources = args.files or ["moses:test", "moses:test_scaffolds"]
    print(f"bench: {cpu_description()}", file=sys.stderr)
    total = {}
    for source in sources:
        texts = read_sequences(source).texts
        texts = texts[:args.limit] if args.limit else texts
        started = time.monotonic()
        parts = parallel.map_chunks(check_chunk, texts, lambda line: print(line, file=sys.stderr),
                                    source, parallel_min=1000)
        row = {k: sum(p[k] for p in parts) for k in parts[0]}
        n = max(row["molecules"], 1)
        print(f"{source}: {row['molecules']} molecules, {row['matching']} match a pattern; "
              f"screen misses {row['misses']}, verdicts that differ {row['disagree']}; all 502 "
              f"patterns {row['full_s'] / n * 1e3:.3f} ms/molecule, screened "
              f"{row['screened_s'] / n * 1e3:.3f} ms ({row['full_s'] / max(row['screened_s'], 1e-9):.2f}x); "
              f"{time.monotonic() - started:.0f} s wall", flush=True)
        for key, value in row.items():
            total[key] = total.get(key, 0) + value
    ok = total["misses"] == 0 and total["disagree"] == 0
    print(f"all: {total['molecules']} molecules, {total['matching']} matching, "
          f"{'identical verdicts' if ok else 'MISMATCH'}; "
          f"{total['full_s'] / max(total['screened_s'], 1e-9):.2f}x faster")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
