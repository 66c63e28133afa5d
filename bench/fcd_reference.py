"""FCD/Test's reference checked: MOSES's shipped ChemNet statistics against ones recomputed from
the test SMILES, and what real test molecules score, drawn at random or taken in file order.

    python bench/fcd_reference.py            # about 6 minutes on 2 cores the first time

- The ChemNet mean and covariance shipped in molsets (``test_stats.npz``: what MOSES's
  ``get_all_metrics`` and seqvae's ``FCD/Test`` use) against statistics recomputed from all
  176,074 test SMILES by the ChemNet seqvae scores samples with (cached like every reference
  statistic): the squared distance of the means and the FCD of the same molecules against each.
- ``--n`` test molecules scored as if they were samples (a model that matched the test
  distribution would score about the same): drawn at random, and taken in file order (lines
  10,000 on). MOSES's split files are not shuffled: a run of consecutive lines is not a sample
  of the split, and scores far from it; a bench that needs held-out molecules as a stand-in for
  the distribution must draw them at random.
- Two random draws of ``--n`` against each other: the estimate's own bias at that size.
- ``--n`` train molecules drawn at random from all of train, and from its first 320,000 lines:
  the data a model of the split learns, and the data the demo learned earlier.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10_000, help="test molecules scored")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from seqvae.data.sources import read_sequences
    from seqvae.evaluation import metrics, moses_files, references

    def report(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    started = time.monotonic()
    test = read_sequences("moses:test").texts
    shipped = moses_files.moses_reference("test")
    recomputed = references.reference_stats(test, include_fcd=True, progress=report)
    drawn = random.Random(args.seed).sample(test, 2 * args.n)
    in_order = test[10_000:10_000 + args.n]
    train = read_sequences("moses:train").texts
    rng = random.Random(args.seed)
    rows = [(f"{args.n} drawn at random from all of train", rng.sample(train, args.n), shipped),
            (f"{args.n} drawn at random from train's first 320,000 lines (the demo's data "
             "earlier)", rng.sample(train[:320_000], args.n), shipped),
            (f"{args.n} test molecules drawn at random", drawn[:args.n], shipped),
            (f"{args.n} test molecules drawn at random", drawn[:args.n], recomputed),
            (f"{args.n} test molecules in file order (lines 10,000 on)", in_order, shipped),
            (f"{args.n} test molecules drawn at random", drawn[:args.n], drawn[args.n:])]
    names = {id(shipped): "shipped statistics (FCD/Test)",
             id(recomputed): "recomputed from all 176,074 SMILES"}
    print("\n| molecules scored | reference | FCD |")
    print("|---|---|---:|")
    for scored_name, scored, reference in rows:
        name = names.get(id(reference), f"{args.n} others drawn at random")
        print(f"| {scored_name} | {name} | {metrics.fcd(scored, reference):.3f} |")
    gap = max(float(abs(shipped.fcd_mean - recomputed.fcd_mean).max()),
              float(abs(shipped.fcd_covariance - recomputed.fcd_covariance).max()))
    print(f"\nlargest difference between the shipped and the recomputed mean and covariance "
          f"entries: {gap:.1e}; {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
