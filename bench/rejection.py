"""Sampling under the grammar mask against rejection sampling under the grammar (issue 11).

    python bench/rejection.py runs/ablation/kekule_beta0.1_molecule_bidir_lr5e-3 --rounds 8

For a SMILES run trained *without* the constrained softmax, draws the same 10,000 prior
samples at T = 1.0 three ways: without the grammar (only the valid ones are scored), under its
mask (``seqvae sample``'s default), and by rejection under the grammar (``--rejection R``: the
model conditioned on grammaticality, ``inference.rejection_sample``), and prints valid,
unique@10k, novelty, FCD against 10,000 MOSES test molecules drawn at random (``--full-test``:
all of them, ``evaluate``'s scale; MOSES's files are ordered), the share the grammar rejected at
the first draw and masked after R rounds, and the sampling time with molecules a second, valid
ones a second. z comes from the run's own prior (``inference.run_prior``: the aggregate
posterior for the demo since session 25). Run it with nothing else on the cores: the times are
compared with each other.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--rounds", type=int, default=8, help="rejection rounds (--rejection)")
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--full-test", action="store_true",
                        help="FCD against all of MOSES test (its cached statistics)")
    args = parser.parse_args()
    import numpy as np

    from latent_ablation import sample_measures  # bench/ is first on sys.path as a script

    from seqvae import inference
    from seqvae.data.sources import read_sequences
    from seqvae.training import load_run

    run = load_run(args.run_dir)
    if not inference.rejection_rounds(run, args.rounds):  # no grammar, or trained masked
        sys.exit(f"{args.run_dir}: a SMILES run trained without the constrained softmax is needed")
    if args.full_test:
        from seqvae.evaluation.moses_metrics import moses_reference

        test = moses_reference("test")
    else:
        test = read_sequences("moses:test").texts
        test = [test[i] for i in np.random.default_rng(args.seed).permutation(len(test))[:10_000]]
    train_set = set(read_sequences("moses:train").texts)
    inference.sample(run, 100, seed=args.seed + 1)  # trace the decoders before timing
    inference.sample(run, 100, seed=args.seed + 1, grammar=False)
    inference.sample(run, 100, seed=args.seed + 1, rejection=2)
    rows = []
    for name, kwargs in (("no grammar (valid ones scored)", {"grammar": False}),
                         ("grammar mask", {"rejection": 0}),
                         (f"rejection under the grammar, {args.rounds} rounds",
                          {"rejection": args.rounds})):
        stats: dict = {}
        started = time.monotonic()
        samples = inference.sample(run, args.samples, temperature=1.0, seed=args.seed, stats=stats,
                                   **kwargs)
        seconds = time.monotonic() - started
        row = {"sampling": name, "s": round(seconds, 1), **sample_measures(samples, train_set, test),
               **stats}
        row["mol_per_s"] = args.samples / seconds
        row["valid_per_s"] = row["valid"] * args.samples / seconds
        rows.append({k: (round(float(v), 4) if isinstance(v, float) else v) for k, v in row.items()})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(f"\n{args.run_dir}, {args.samples} samples at T = 1.0 each\n")
    print(f"z from {inference.describe_prior(run)}\n")
    scale = "all" if args.full_test else "10k"
    print(f"| sampling | valid | unique@10k | novelty | FCD/Test ({scale}) | rejected / masked | s | "
          "mol/s | valid mol/s |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|")
    for row in rows:
        fcd = "n/a" if row["fcd"] is None else f"{row['fcd']:.2f}"
        shares = (f"{row['rejected']:.3f} / {row['masked']:.4f}" if row.get("rejected") else "")
        print(f"| {row['sampling']} | {row['valid']:.4f} | {row['unique']:.3f} | "
              f"{row['novelty']:.3f} | {fcd} | {shares} | {row['s']} | {row['mol_per_s']:.0f} | "
              f"{row['valid_per_s']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
