"""How many new molecules meeting a condition a draw of z near molecules that meet it can give:
the ceiling of steering z, beside sampling the prior and filtering.

For the conditions (``--where``, as ``seqvae sample --where``; the joint condition of
``bench/conditional.py`` by default) the kernels the search starts from are built as it builds
them (``conditional.kernels``: up to 1,000 reference molecules meeting the conditions). Then,
``--draws`` molecules each:

- the prior as the run samples it (``inference.sample``), checked by RDKit: the hit rate and the
  rate of distinct hits;
- one z from a kernel chosen at random at each width in ``--widths`` (times the kernel's own
  scale), decoded as the search decodes (without the grammar's mask, a rejected string a miss):
  the hit rate, the share of hits that are the reference molecules themselves, unique among the
  hits, and the rate of new distinct hits (neither a reference molecule nor found before at that
  width), over the prior's rate of distinct hits;
- the z that hit at the widest width decoded three times more with fresh seeds (the same z, and
  z moved by 0.3 of the kernels' median scale): what choosing z by its outcome could give.

The search (``bench/conditional.py``) chooses kernels by their rate of new hits and adds each
new hit as a kernel; this bench shows the rate its draws are bounded by on the run.

    flock /tmp/seqvae-bench.lock python bench/kernel_ceiling.py runs/demo --out bench/kernel_ceiling.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from machine import cpu_model  # noqa: E402
from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up

import numpy as np  # noqa: E402

REDECODES = 3  # fresh decodes of each z that hit


def decoded(run, z, seed: int, rounds: int) -> list:
    """Texts decoded from ``z`` as the search decodes them (None: rejected by the grammar)."""
    from seqvae import inference
    from seqvae.conditional.search import decode_or_reject

    if not rounds:
        return inference.decode(run, z, greedy=False, seed=seed, batch_size=len(z))
    return decode_or_reject(run, z, greedy=False, seed=seed, batch_size=len(z))


class Tally:
    """Counts over a row's batches: draws, hits, reference molecules among the hits, distinct
    hits, and new distinct hits (neither a reference molecule nor in ``seen``, which grows)."""

    def __init__(self, references: set, seen: set | None = None):
        self.references, self.seen = references, set() if seen is None else seen
        self.draws = self.hits = self.refs = self.new = 0
        self.every: set = set()

    def add(self, checked) -> None:
        """Counts one batch's checks (``conditions.Checked``)."""
        self.draws += len(checked.ok)
        for row in np.flatnonzero(checked.ok):
            smiles = checked.canonical[row]
            self.hits += 1
            self.refs += smiles in self.references
            self.every.add(smiles)
            if smiles not in self.references and smiles not in self.seen:
                self.new += 1
                self.seen.add(smiles)

    def row(self, label: str) -> tuple:
        """``(label, hit rate, refs among hits, unique among hits, new distinct rate, distinct
        rate)``."""
        hits, draws = max(self.hits, 1), max(self.draws, 1)
        return (label, self.hits / draws, self.refs / hits, len(self.every) / hits,
                self.new / draws, len(self.every) / draws)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--where", action="append", default=None)
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--widths", default="1.0,1.3,1.6,1.8")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/kernel_ceiling.md")
    args = parser.parse_args(argv)
    started = time.monotonic()

    from seqvae import inference
    from seqvae.conditional import kernels as kernel_lib
    from seqvae.conditional.conditions import Checker, describe, parse_conditions
    from seqvae.conditional.search import _canonical
    from seqvae.run import load_run

    run = load_run(args.run_dir)
    conditions = parse_conditions(args.where or ["logp>=3", "qed>=0.85"])
    checker = Checker(conditions)
    rounds = inference.rejection_rounds(run)
    table = kernel_lib.reference_table(run, checker.names)
    rows, _ = kernel_lib.near_target(table, conditions, seed=args.seed)
    kept, means, scales = kernel_lib.encoded_kernels(run, [table.texts[i] for i in rows])
    kernels = kernel_lib.Kernels(means, scales, np.zeros(len(kept)), args.seed)
    references = _canonical(table.texts, table.source)
    batches = range(0, args.draws, args.batch)

    prior = Tally(set())
    for step, start in enumerate(batches):
        count = min(args.batch, args.draws - start)
        texts = inference.sample(run, count, seed=1000 + step, batch_size=count, rejection=rounds)
        prior.add(checker.check([t or "" for t in texts]))
    prior_rate = prior.new / args.draws

    rng = np.random.default_rng(args.seed)
    rows_out, hitting = [], None
    for width in [float(w) for w in args.widths.split(",")]:
        tally = Tally(references)
        zs, oks = [], []
        for step, start in enumerate(batches):
            count = min(args.batch, args.draws - start)
            chosen = rng.integers(0, len(kernels), count)
            z = kernels.draw(chosen, np.zeros((count, means.shape[1]), np.float32), width)
            checked = checker.check([t or "" for t in decoded(run, z, step, rounds)])
            tally.add(checked)
            zs.append(z)
            oks.append(checked.ok)
        hitting = (np.concatenate(zs)[np.concatenate(oks)], tally.seen)
        rows_out.append(tally.row(f"kernels, {width:g}x"))
    z_hit, seen = hitting
    z_scale = float(np.median(scales))
    for move in (0.0, 0.3):
        tally = Tally(references, seen)
        for repeat in range(REDECODES):
            z = z_hit + np.float32(move * z_scale) * rng.standard_normal(z_hit.shape).astype(
                np.float32)
            tally.add(checker.check([t or "" for t in decoded(run, z, 500 + repeat, rounds)]))
        rows_out.append(tally.row(
            f"the z that hit, decoded again{'' if not move else f', moved {move:g}'}"))

    lines = [f"# How far steering z can go: {describe(conditions)}", "",
             "    flock /tmp/seqvae-bench.lock python bench/kernel_ceiling.py "
             + " ".join(argv if argv is not None else sys.argv[1:]), "",
             f"Run `{args.run_dir}`, {len(kept):,} kernels (reference molecules of "
             f"{table.source} meeting the conditions), {args.draws:,} draws a row; "
             f"{cpu_model()}; {time.monotonic() - started:.0f} s in all.", "",
             f"The prior as the run samples it: hit rate {100 * prior.hits / args.draws:.1f}%, "
             f"distinct hits {100 * prior_rate:.1f}% of the draws. Five times its rate of "
             f"distinct hits at the same decoding speed needs {500 * prior_rate:.0f}% of the "
             "draws to be new distinct hits.", "",
             "| z from | hit rate | reference molecules among hits | unique among hits | new "
             "distinct hits | over the prior's |", "|---|---:|---:|---:|---:|---:|"]
    for label, hit, refs, unique, new, _ in rows_out:
        lines.append(f"| {label} | {100 * hit:.1f}% | {100 * refs:.1f}% | {100 * unique:.1f}% | "
                     f"{100 * new:.1f}% | {new / max(prior_rate, 1e-9):.1f}x |")
    lines += ["", "new distinct hits: hits neither a reference molecule nor found before in the "
              "row (the re-decodes: nor found at the widest width); the re-decodes' rates are "
              "per re-decode."]
    with open(args.out, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
