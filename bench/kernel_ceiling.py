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

REDECODES = 3  # fresh decodes of each z that hit


def decoded(run, z, seed: int, rounds: int) -> list:
    """Texts decoded from ``z`` as the search decodes them (None: rejected by the grammar)."""
    from seqvae import inference
    from seqvae.data.preparation import ids_to_texts

    if not rounds:
        return inference.decode(run, z, greedy=False, seed=seed, batch_size=len(z))
    out = []
    inference.decode_id_batches(run, z, out.append, greedy=False, seed=seed,
                                batch_size=len(z), reject=True)
    ids, rejected = out[0]
    return [None if bad else text for text, bad in zip(ids_to_texts(run.codec, ids), rejected)]


def tally(checked, references: set, seen: set) -> dict:
    """Hits, reference molecules among them, and new distinct hits (added to ``seen``)."""
    hits = refs = new = 0
    distinct = set()
    for row in range(len(checked.ok)):
        if not checked.ok[row]:
            continue
        smiles = checked.canonical[row]
        hits += 1
        refs += smiles in references
        distinct.add(smiles)
        if smiles not in references and smiles not in seen:
            new += 1
            seen.add(smiles)
    return {"hits": hits, "refs": refs, "new": new, "distinct": len(distinct)}


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

    import numpy as np

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

    prior_seen: set = set()
    prior = {"hits": 0, "distinct": 0}
    for step, start in enumerate(batches):
        count = min(args.batch, args.draws - start)
        texts = inference.sample(run, count, seed=1000 + step, batch_size=count, rejection=rounds)
        counts = tally(checker.check([t or "" for t in texts]), set(), prior_seen)
        prior["hits"] += counts["hits"]
        prior["distinct"] += counts["new"]
    prior_rate = prior["distinct"] / args.draws

    rng = np.random.default_rng(args.seed)
    rows_out, hitting = [], None
    for width in [float(w) for w in args.widths.split(",")]:
        seen: set = set()
        total = {"hits": 0, "refs": 0, "new": 0}
        every: set = set()
        zs, oks = [], []
        for step, start in enumerate(batches):
            count = min(args.batch, args.draws - start)
            chosen = rng.integers(0, len(kernels), count)
            z = kernels.draw(chosen, np.zeros((count, means.shape[1]), np.float32), width)
            checked = checker.check([t or "" for t in decoded(run, z, step, rounds)])
            counts = tally(checked, references, seen)
            every.update(checked.canonical[r] for r in np.flatnonzero(checked.ok))
            for key in total:
                total[key] += counts[key]
            zs.append(z)
            oks.append(checked.ok)
        hitting = (np.concatenate(zs)[np.concatenate(oks)], seen)
        rows_out.append((f"kernels, {width:g}x", total["hits"] / args.draws,
                         total["refs"] / max(total["hits"], 1), len(every) / max(total["hits"], 1),
                         total["new"] / args.draws))
    z_hit, seen = hitting
    z_scale = float(np.median(scales))
    for move in (0.0, 0.3):
        total = {"hits": 0, "refs": 0, "new": 0}
        every = set()
        for repeat in range(REDECODES):
            z = z_hit + np.float32(move * z_scale) * rng.standard_normal(z_hit.shape).astype(
                np.float32)
            checked = checker.check([t or "" for t in decoded(run, z, 500 + repeat, rounds)])
            counts = tally(checked, references, seen)
            every.update(checked.canonical[r] for r in np.flatnonzero(checked.ok))
            for key in total:
                total[key] += counts[key]
        draws = REDECODES * len(z_hit)
        rows_out.append((f"the z that hit, decoded again{'' if not move else f', moved {move:g}'}",
                         total["hits"] / draws, total["refs"] / max(total["hits"], 1),
                         len(every) / max(total["hits"], 1), total["new"] / draws))

    lines = [f"# How far steering z can go: {describe(conditions)}", "",
             "    flock /tmp/seqvae-bench.lock python bench/kernel_ceiling.py "
             + " ".join(argv if argv is not None else sys.argv[1:]), "",
             f"Run `{args.run_dir}`, {len(kept):,} kernels (reference molecules of "
             f"{table.source} meeting the conditions), {args.draws:,} draws a row; "
             f"{cpu_model()}; {time.monotonic() - started:.0f} s in all.", "",
             f"The prior as the run samples it: hit rate {100 * prior['hits'] / args.draws:.1f}%, "
             f"distinct hits {100 * prior_rate:.1f}% of the draws. Five times its rate of "
             f"distinct hits at the same decoding speed needs {500 * prior_rate:.0f}% of the "
             "draws to be new distinct hits.", "",
             "| z from | hit rate | reference molecules among hits | unique among hits | new "
             "distinct hits | over the prior's |", "|---|---:|---:|---:|---:|---:|"]
    for label, hit, refs, unique, new in rows_out:
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
