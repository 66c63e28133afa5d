"""Asked-for molecules: ``seqvae sample --where/--scaffold`` against sampling the prior and
filtering, on the same run, for the same time.

- Property targets: logP 1, 2, 3, 4 (± 0.5) and 4.5 (± 0.25), QED >= 0.8 and >= 0.9, and
  logP >= 3 with QED >= 0.85. Each method (``conditional.sample_where``, steered; the same with
  ``steer=False``: the run's own sampler and the same RDKit checks) runs ``--seconds`` each.
- Scaffolds: 3 of the most common Murcko scaffolds of MOSES train and 3 of the most common of
  MOSES test_scaffolds (absent from train as Murcko scaffolds by MOSES's split); the steered
  search runs until 1,000 distinct molecules or ``--scaffold-seconds``, sample-and-filter for
  as long as it took.

Per method: the first-draw hit rate (decoded molecules meeting every condition, repeats and
the reference molecules that steer the search included), distinct new molecules per second
(what the user gets; the steered search leaves out its reference molecules), unique among the
hits (distinct / hits), novelty (distinct hits not in MOSES train / distinct hits, a reference
molecule counting as not novel), and IntDiv (MOSES's IntDiv1 of the molecules found) beside
that of unconditioned samples.

    flock /tmp/seqvae-bench.lock python bench/conditional.py runs/demo --out bench/conditional.md
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

PROPERTY_TARGETS = [("logP = 1 ± 0.5", ["logp=1±0.5"]), ("logP = 2 ± 0.5", ["logp=2±0.5"]),
                    ("logP = 3 ± 0.5", ["logp=3±0.5"]), ("logP = 4 ± 0.5", ["logp=4±0.5"]),
                    ("logP = 4.5 ± 0.25", ["logp=4.5±0.25"]), ("QED ≥ 0.8", ["qed>=0.8"]),
                    ("QED ≥ 0.9", ["qed>=0.9"]), ("logP ≥ 3 and QED ≥ 0.85",
                                                  ["logp>=3", "qed>=0.85"])]
# The most common Murcko scaffolds of 100,000 MOSES train molecules (benzene left out) and of
# 50,000 test_scaffolds molecules, drawn with seed 0 (none of the latter is the Murcko scaffold
# of a train molecule: MOSES's scaffold split).
SCAFFOLDS = [("c1ccncc1", "train"), ("O=C(Nc1ccccc1)c1ccccc1", "train"),
             ("c1ccc2[nH]cnc2c1", "train"), ("c1ccc2ncccc2c1", "test_scaffolds"),
             ("c1ccc(-c2cscn2)cc1", "test_scaffolds"), ("O=C(Nc1nncs1)c1ccccc1", "test_scaffolds")]
DIVERSITY_MOLECULES = 2000  # IntDiv on at most this many of the molecules found




def measured(found, train: set, seconds: float | None = None) -> dict:
    """The row of one search: rates, uniqueness, novelty, diversity."""
    import numpy as np

    from seqvae.evaluation.metrics import internal_diversity

    molecules = found.molecules
    rng = np.random.default_rng(0)
    shown = (list(rng.choice(molecules, DIVERSITY_MOLECULES, replace=False))
             if len(molecules) > DIVERSITY_MOLECULES else molecules)
    # distinct hits that are new (neither found before nor a reference molecule) and not in
    # train, over all distinct hits: a reference molecule found again counts as not novel
    novel = (sum(m not in train for m in molecules) / max(len(molecules), 1)
             * found.distinct / max(found.unique_hits, 1))
    return {"draws": found.draws, "hits": found.hits, "found": len(molecules),
            "seconds": seconds if seconds is not None else found.seconds,
            "hit_rate": found.hit_rate, "unique": found.unique_hits / max(found.hits, 1),
            "novel": novel,
            "intdiv": internal_diversity(shown) if len(shown) > 1 else float("nan"),
            "per_second": len(molecules) / max(seconds or found.seconds, 1e-9)}


def run_targets(run, args, train, report) -> list[dict]:
    from seqvae.conditional import sample_where

    rows = []
    for number, (label, where) in enumerate(PROPERTY_TARGETS, 1):
        if args.targets and number not in args.targets:
            continue
        row = {"target": label}
        for method, steer in (("steered", True), ("filter", False)):
            found = sample_where(run, 10**7, where, seed=args.seed, steer=steer,
                                 time_budget=args.seconds, max_draws=10**8)
            row[method] = measured(found, train)
            report(f"{label} {method}: {found.summary()}")
        rows.append(row)
    return rows


def run_scaffolds(run, args, train, report) -> list[dict]:
    from rdkit import Chem, rdBase

    from seqvae.conditional import sample_where

    with rdBase.BlockLogs():
        sample = [Chem.MolFromSmiles(s) for s in list(train)[:args.train_sample]]
    rows = []
    for smiles, origin in SCAFFOLDS:
        query = Chem.MolFromSmiles(smiles)
        holding = sum(m is not None and m.HasSubstructMatch(query) for m in sample)
        steered = sample_where(run, 1000, (), smiles, seed=args.seed,
                               time_budget=args.scaffold_seconds, max_draws=10**8)
        report(f"{smiles} steered: {steered.summary()}")
        baseline = sample_where(run, 10**7, (), smiles, seed=args.seed, steer=False,
                                time_budget=steered.seconds, max_draws=10**8)
        report(f"{smiles} filter: {baseline.summary()}")
        rows.append({"target": smiles, "origin": origin, "holding": holding / len(sample),
                     "steered": measured(steered, train), "filter": measured(baseline, train)})
    return rows


def unconditioned_diversity(run, seed: int) -> float:
    from seqvae import inference
    from seqvae.data.chemistry import remove_invalid
    from seqvae.evaluation.metrics import internal_diversity

    return internal_diversity(remove_invalid(inference.sample(run, DIVERSITY_MOLECULES,
                                                              seed=seed)))


def cell(row: dict, key: str, fmt: str) -> str:
    value = row[key]
    return "–" if value != value else format(value, fmt)


def table(rows: list[dict], scaffolds: bool) -> str:
    head = ("| scaffold | Murcko scaffold of | train molecules holding it | method | s | found | "
            "first-draw hit rate | found/s | unique among hits | novel | IntDiv | speed-up |\n"
            "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n") if scaffolds else (
        "| target | method | s | found | first-draw hit rate | found/s | unique among hits | "
        "novel | IntDiv | speed-up |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    lines = []
    for row in rows:
        speedup = row["steered"]["per_second"] / max(row["filter"]["per_second"], 1e-9)
        for method, name in (("steered", "steered search"), ("filter", "prior + filter")):
            m = row[method]
            first = (f"`{row['target']}` | {row['origin']} | {100 * row['holding']:.2f}%"
                     if scaffolds else row["target"])
            lines.append(
                f"| {first if method == 'steered' else ' | '.join([''] * (3 if scaffolds else 1))}"
                f" | {name} | {m['seconds']:.0f} | {m['found']:,} | {100 * m['hit_rate']:.1f}% | "
                f"{cell(m, 'per_second', '.1f')} | {100 * m['unique']:.1f}% | "
                f"{100 * m['novel']:.1f}% | {cell(m, 'intdiv', '.3f')} | "
                + (f"**{speedup:.1f}x**" if method == "steered" else "") + " |")
    return head + "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="each method's time per property target (default 60)")
    parser.add_argument("--scaffold-seconds", type=float, default=120.0,
                        help="the steered search's limit per scaffold (default 120)")
    parser.add_argument("--train-sample", type=int, default=100_000,
                        help="MOSES train molecules searched for each scaffold (default 100,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench/conditional.md")
    parser.add_argument("--only", choices=("properties", "scaffolds"))
    parser.add_argument("--targets", type=lambda text: {int(n) for n in text.split(",")},
                        default=set(), help="the property targets to run, by their number "
                        "in the table (1-8; default: all)")
    args = parser.parse_args(argv)

    from seqvae.conditional import sample_where
    from seqvae.data.moses import read_split
    from seqvae.run import load_run

    def report(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    started = time.monotonic()
    load = os.getloadavg()[0]
    run = load_run(args.run_dir)
    train = set(read_split("train")[0])
    for steer in (True, False):  # trace the decoders before anything is timed
        sample_where(run, 5, ["logp>=2"], seed=1, steer=steer, max_draws=500)
        sample_where(run, 5, (), "c1ccccc1", seed=1, steer=steer, max_draws=500)
    diversity = unconditioned_diversity(run, args.seed)
    report(f"IntDiv of {DIVERSITY_MOLECULES} unconditioned samples: {diversity:.3f}")
    properties = run_targets(run, args, train, report) if args.only != "scaffolds" else []
    scaffolds = run_scaffolds(run, args, train, report) if args.only != "properties" else []
    command = "python bench/conditional.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = (f"# Asked-for molecules: steered search against prior + filter\n\n"
            f"    flock /tmp/seqvae-bench.lock {command}\n\n"
            f"Run `{args.run_dir}`, seed {args.seed}; {cpu_model()}, {os.cpu_count()} logical "
            f"cores, load average {load:.2f} at the start (other work shares the CPU; both "
            f"methods of a row ran back to back under it); {time.monotonic() - started:.0f} s "
            f"in all. IntDiv of {DIVERSITY_MOLECULES:,} unconditioned samples: "
            f"{diversity:.3f}.\n\n")
    if properties:
        text += (f"## Property targets ({args.seconds:.0f} s each method)\n\n"
                 + table(properties, False) + "\n")
    if scaffolds:
        text += ("## Scaffolds (the steered search to 1,000 molecules, prior + filter for as "
                 "long)\n\n" + table(scaffolds, True) + "\n")
    text += ("found: distinct molecules meeting every condition (the steered search leaves out "
             "the reference molecules it is steered by); first-draw hit rate: decoded molecules "
             "meeting every condition, repeats and reference molecules included; unique among "
             "hits: distinct hits / hits; novel: distinct hits not in MOSES train / distinct "
             "hits; IntDiv: MOSES's IntDiv1 of (at most "
             f"{DIVERSITY_MOLECULES:,} of) the molecules found; speed-up: found/s of the steered "
             "search over prior + filter's.\n")
    with open(args.out, "w", encoding="utf-8") as handle:
        handle.write(text)
    report(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
