"""What tells where to draw z for a property target: the property head, or the RDKit value of a
kernel's own molecule.

For ``--molecules`` reference molecules of the run's cached property table drawn at random
(``seqvae.conditional.kernels.reference_table``), one z is drawn from each one's kernel (its
posterior, widened by ``model.prior_widen``, as the search draws) and decoded as the run
samples; the decoded molecule's RDKit value of ``--property`` is then correlated with the head's
prediction at the drawn z, the head's prediction at the kernel's centre (the posterior mean) and
the kernel molecule's own RDKit value. Also: how often the decoded molecule is the kernel's own,
and by how much the others' values differ from it (median absolute difference).

    flock /tmp/seqvae-bench.lock python bench/kernel_signal.py runs/demo --out bench/kernel_signal.md
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--property", default="logp")
    parser.add_argument("--molecules", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/kernel_signal.md")
    args = parser.parse_args(argv)

    import numpy as np

    from seqvae import inference
    from seqvae.conditional import kernels as kernel_lib
    from seqvae.data import properties as props
    from seqvae.data.chemistry import canonical_or_as_is
    from seqvae.property_fit import load_head
    from seqvae.run import load_run

    run = load_run(args.run_dir)
    head = load_head(run)
    table = kernel_lib.reference_table(run, [args.property])
    rng = np.random.default_rng(args.seed)
    rows = rng.choice(len(table.texts), min(args.molecules, len(table.texts)), replace=False)
    kept, means, scales = kernel_lib.encoded_kernels(run, [table.texts[i] for i in rows])
    rows = rows[kept]
    z = means + scales * rng.standard_normal(means.shape).astype(np.float32)
    rounds = inference.rejection_rounds(run)
    texts = (inference.rejection_sample(run, z, rounds, seed=args.seed) if rounds
             else inference.decode(run, z, greedy=False, seed=args.seed))
    values = props.rdkit_properties(texts, [args.property])[:, 0]
    own = table.values[rows, 0]
    index = head.index(args.property)
    at_z, at_centre = head.predict(z)[:, index], head.predict(means)[:, index]
    ok = ~np.isnan(values)
    same = np.array(canonical_or_as_is(texts)) == np.array(canonical_or_as_is(
        [table.texts[i] for i in rows]))

    def corr(x):
        return float(np.corrcoef(x[ok], values[ok])[0, 1])

    other = ok & ~same
    lines = [f"# Where to draw z for a {args.property} target: the head or the kernel's molecule",
             "", f"    flock /tmp/seqvae-bench.lock python bench/kernel_signal.py "
             + " ".join(argv if argv is not None else sys.argv[1:]), "",
             f"{len(rows):,} reference molecules of {table.source} drawn at random (seed "
             f"{args.seed}), one z from each one's kernel (widened "
             f"{run.config.model.prior_widen:g}x), decoded as the run samples; "
             f"{int(ok.sum()):,} decoded molecules valid.", "",
             f"| what predicts the decoded molecule's {args.property} | correlation |",
             "|---|---:|",
             f"| the property head's prediction at the drawn z | {corr(at_z):.2f} |",
             f"| the property head's prediction at the kernel's centre | {corr(at_centre):.2f} |",
             f"| the kernel molecule's own RDKit value | {corr(own):.2f} |", "",
             f"The decoded molecule is the kernel's own in {100 * same[ok].mean():.1f}% of draws; "
             f"the others' {args.property} differs from the kernel molecule's by "
             f"{np.median(np.abs(values[other] - own[other])):.2f} in the median."]
    with open(args.out, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
