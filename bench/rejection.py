"""Sampling under the grammar mask against rejection sampling under the grammar (issue 11).

    python bench/rejection.py runs/ablation/kekule_beta0.1_molecule_bidir_lr5e-3 --rounds 8

For a SMILES run trained *without* the constrained softmax, draws the same 10,000 prior
samples at T = 1.0 three ways: without the grammar (only the valid ones are scored), under its
mask (``seqvae sample``'s default), and by rejection under the grammar (``--rejection R``: the
model conditioned on grammaticality, ``inference.rejection_sample``), and prints valid,
unique@10k, novelty, FCD against 10,000 MOSES test molecules drawn at random (``--full-test``:
all of them, ``evaluate``'s scale; MOSES's files are ordered), the share the grammar rejected at
the first draw and masked after R rounds, and the sampling time with molecules a second, valid
ones a second. Each way is first called once untimed on as many samples with another seed (its
traces and XLA compiles, which a command pays once: printed as "first call s"), so that the rates
compare steady states; then the three are timed in turns, ``--repeats`` times (A B C A B C ...,
so that a change of the machine's load falls on each alike), and the medians are printed with
the range of the ratios. Last, the bound on any exact sampler of ``p(x | x grammatical)`` that
decodes from the model: counting decoded tokens, a sample costs the accepted string's tokens plus
``r / (1 - r)`` rejected strings, each stopped at its violation at best, against one string of any
kind without the grammar (measured on the no-grammar draw's own strings). z comes from the
run's own prior (``inference.run_prior``: the aggregate posterior for the demo now).
Run it with nothing else on the cores: the times are compared with each other.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--rounds", type=int, default=8, help="rejection rounds (--rejection)")
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--full-test", action="store_true",
                        help="FCD against all of MOSES test (its cached statistics)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed draws of each way, in turns (medians printed)")
    args = parser.parse_args()
    import statistics

    import numpy as np

    from latent_ablation import sample_measures  # bench/ is first on sys.path as a script

    from seqvae import inference
    from seqvae.data.sources import read_sequences
    from seqvae.run import load_run

    run = load_run(args.run_dir)
    if not inference.rejection_rounds(run, args.rounds):  # no grammar, or trained masked
        sys.exit(f"{args.run_dir}: a SMILES run trained without the constrained softmax is needed")
    if args.full_test:
        from seqvae.evaluation.moses_files import moses_reference

        test = moses_reference("test")
    else:
        test = read_sequences("moses:test").texts
        test = [test[i] for i in np.random.default_rng(args.seed).permutation(len(test))[:10_000]]
    train_set = set(read_sequences("moses:train").texts)
    ways = (("no grammar (valid ones scored)", {"grammar": False}),
            ("grammar mask", {"rejection": 0}),
            (f"rejection under the grammar, {args.rounds} rounds", {"rejection": args.rounds}))
    firsts = []
    for _, kwargs in ways:  # traces, and from 10,000 rows the XLA compiles: untimed
        started = time.monotonic()
        inference.sample(run, args.samples, temperature=1.0, seed=args.seed + 1, **kwargs)
        firsts.append(time.monotonic() - started)
    seconds: list[list[float]] = [[] for _ in ways]
    outputs: list = [None] * len(ways)
    for _ in range(max(args.repeats, 1)):  # in turns: the machine's load falls on each alike
        for i, (_, kwargs) in enumerate(ways):
            stats: dict = {}
            started = time.monotonic()
            samples = inference.sample(run, args.samples, temperature=1.0, seed=args.seed,
                                       stats=stats, **kwargs)
            seconds[i].append(time.monotonic() - started)
            outputs[i] = (samples, stats)  # the same seed: the same samples every time
    rows = []
    for (name, _), first, times, (samples, stats) in zip(ways, firsts, seconds, outputs):
        median = statistics.median(times)
        row = {"sampling": name, "first call s": round(first, 1), "s": round(median, 1),
               **sample_measures(samples, train_set, test), **stats}
        row["mol_per_s"] = args.samples / median
        row["valid_per_s"] = row["valid"] * args.samples / median
        row["times"] = [round(t, 2) for t in times]
        rows.append({k: (round(float(v), 4) if isinstance(v, float) else v) for k, v in row.items()})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(f"\n{args.run_dir}, {args.samples} samples at T = 1.0 each\n")
    print(f"z from {inference.describe_prior(run)}\n")
    scale = "all" if args.full_test else "10k"
    print(f"| sampling | valid | unique@10k | novelty | FCD/Test ({scale}) | rejected / masked | "
          f"first call s | s (median of {len(seconds[0])}) | mol/s | valid mol/s |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for row in rows:
        fcd = "n/a" if row["fcd"] is None else f"{row['fcd']:.2f}"
        shares = (f"{row['rejected']:.3f} / {row['masked']:.4f}" if row.get("rejected") else "")
        print(f"| {row['sampling']} | {row['valid']:.4f} | {row['unique']:.3f} | "
              f"{row['novelty']:.3f} | {fcd} | {shares} | {row['first call s']} | {row['s']} | "
              f"{row['mol_per_s']:.0f} | {row['valid_per_s']:.0f} |")
    plain = rows[0]
    print()
    for i, row in enumerate(rows[1:], 1):
        raw = row["mol_per_s"] / plain["mol_per_s"]
        valid = row["valid_per_s"] / plain["valid_per_s"]
        turns = [a / b for a, b in zip(seconds[0], seconds[i])]  # each turn's raw ratio
        print(f"{row['sampling']} / no grammar: {raw:.3f}x the molecules a second (turns "
              f"{min(turns):.3f}-{max(turns):.3f}x), {valid:.3f}x the valid ones")
    b = exact_sampler_bound(run, args.samples, args.seed)
    print(f"\nexact samplers' bound, in decoded tokens (no-grammar draw: {b['rejected']:.1%} "
          f"rejected; strings {b['mean_length']:.1f} tokens, accepted {b['accepted_length']:.1f}, "
          f"rejected {b['rejected_length']:.1f}, violation at token {b['violation_at']:.1f}, "
          f"{b['at_eos']:.0%} of them an <eos> with something still open): decoding every "
          f"rejected string whole {b['whole']:.3f}x, stopping it at its violation "
          f"{b['stopped']:.3f}x the molecules a second of sampling without the grammar")
    return 0


def exact_sampler_bound(run, samples: int, seed: int) -> dict:
    """What an exact sampler of the model conditioned on the grammar can reach at best, in
    decoded tokens: the no-grammar draw of ``seed`` (``inference.sample``'s z and noise), its
    strings' lengths (with ``<eos>``) and first violations (``inference.first_violations``)."""
    import numpy as np

    from seqvae import inference
    from seqvae.data.vocabulary import EOS_ID, PAD_ID

    z = inference.prior_draw(run, samples, seed)
    batches: list = []
    inference.decode_id_batches(run, z, batches.append, greedy=False, seed=seed, grammar=False)
    ids = np.concatenate(batches)
    lengths = (ids != PAD_ID).sum(axis=1)
    first = inference.first_violations(run, ids)
    bad = first >= 0
    rejected = float(bad.mean())
    odds = rejected / (1.0 - rejected)
    accepted_length = float(lengths[~bad].mean())
    out = {"rejected": rejected, "mean_length": float(lengths.mean()),
           "accepted_length": accepted_length,
           "rejected_length": float(lengths[bad].mean()) if bad.any() else 0.0,
           "violation_at": float((first[bad] + 1).mean()) if bad.any() else 0.0,
           "at_eos": float((ids[bad, first[bad]] == EOS_ID).mean()) if bad.any() else 0.0}
    out["whole"] = out["mean_length"] / (accepted_length + odds * out["rejected_length"])
    out["stopped"] = out["mean_length"] / (accepted_length + odds * out["violation_at"])
    return out


if __name__ == "__main__":
    sys.exit(main())
