"""Learning curve of one recipe: greedy reconstruction and prior validity against training time.

One run on the demo's data (320k MOSES molecules) of ``--steps`` optimizer steps (the schedules
laid over them; every machine trains the same model, only the minutes differ) or, without
``--steps``, of ``--minutes`` (the schedules laid over the time budget, as in any time-bounded
run); a checkpoint every ``--every`` steps, all kept; then every checkpoint is measured the same
way:

- greedy reconstruction from the posterior mean, exact canonical SMILES, on the first ``--recon``
  MOSES test molecules (and token accuracy);
- validity of ``--samples`` prior samples at T = 1.0, with and without the SMILES grammar mask.

    python bench/learning_curve.py --recipe kekule_beta0.3_molecule_bidir --steps 5000 --every 500 --out runs/curve
    python bench/learning_curve.py --recipe kekule_beta0.3_molecule_bidir --minutes 45 --out runs/curve

The table (``OUT/curve.md``) has one row per checkpoint: step, training minutes so far (the time
the run's own log recorded at that step), and the figures. Training is skipped when
``OUT/RECIPE`` already holds checkpoints; ``--measure-only`` measures what is there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from latent_ablation import BASELINE, RECIPES  # noqa: E402


def train_curve(recipe: str, minutes: float, steps: int, every: int, out: str) -> str:
    from seqvae.presets import demo_config
    from seqvae.workflows import train

    run_dir = os.path.join(out, recipe)
    config = demo_config().with_overrides(
        BASELINE + RECIPES[recipe] + [f"train.max_steps={steps}", "train.epochs=1000",
                           f"train.time_budget={0 if steps else minutes * 60:g}",
                           f"train.checkpoint_every={every}",
                           "train.keep_checkpoints=1000", "train.export_at_end=false"])
    if not os.path.exists(os.path.join(run_dir, "checkpoints")):
        summary = train(config, run_dir, None)
        print(f"{recipe}: {summary['steps']} steps in {summary['train_seconds']:.0f}s",
              file=sys.stderr)
    return run_dir


def checkpoint_times(run_dir: str) -> dict[int, float]:
    """step -> training seconds at that step, from the run's metrics log (a resumed run logs
    its time from zero again: the earlier part is added)."""
    times, offset, last = {}, 0.0, 0.0
    with open(os.path.join(run_dir, "metrics.jsonl")) as handle:
        for record in map(json.loads, handle):
            if record.get("kind") == "step" and "train_s" in record:
                if record["train_s"] < last:
                    offset += last
                last = record["train_s"]
                times[record["step"]] = offset + last
    return times


def measure(run_dir: str, checkpoint: str, args) -> dict:
    from seqvae import inference
    from seqvae.data.sources import read_sequences
    from seqvae.evaluation import metrics
    from seqvae.run import load_run

    run = load_run(run_dir, checkpoint)
    test = read_sequences("moses:test").texts[:args.recon]
    greedy = inference.reconstruct(run, test, num_samples=0)
    row = {"recon_greedy": greedy["exact_match_mean_z"],
           "token_acc": greedy["token_accuracy_mean_z"]}
    for grammar in (False, True):
        try:
            samples = inference.sample(run, args.samples, temperature=1.0, seed=0, grammar=grammar)
        except TypeError:  # a seqvae without the grammar mask
            if grammar:
                continue
            samples = inference.sample(run, args.samples, temperature=1.0, seed=0)
        row["valid_t1" + ("_grammar" if grammar else "")] = metrics.fraction_valid(samples)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="demo", help=f"one of: {', '.join(RECIPES)}")
    parser.add_argument("--minutes", type=float, default=60.0, help="training time budget")
    parser.add_argument("--steps", type=int, default=0,
                        help="train this many steps instead of --minutes")
    parser.add_argument("--every", type=int, default=400, help="steps between checkpoints")
    parser.add_argument("--out", default="runs/curve")
    parser.add_argument("--recon", type=int, default=1000, help="test molecules, greedy")
    parser.add_argument("--samples", type=int, default=2000, help="prior samples per checkpoint")
    parser.add_argument("--measure-only", action="store_true")
    args = parser.parse_args()
    if args.recipe not in RECIPES:
        parser.error(f"unknown recipe {args.recipe!r}")
    import tensorflow as tf

    run_dir = os.path.join(args.out, args.recipe)
    if not args.measure_only:
        train_curve(args.recipe, args.minutes, args.steps, args.every, args.out)
    times = checkpoint_times(run_dir)
    state = tf.train.get_checkpoint_state(os.path.join(run_dir, "checkpoints"))
    rows = []
    for checkpoint in state.all_model_checkpoint_paths:
        step = int(tf.train.load_variable(checkpoint, "step/.ATTRIBUTES/VARIABLE_VALUE"))
        logged = [s for s in times if s <= step]
        minutes = times[max(logged)] / 60 if logged else 0.0
        row = {"step": step, "train_min": round(minutes, 1), **measure(run_dir, checkpoint, args)}
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    columns = list(rows[0]) if rows else []
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(f"{r.get(c):.3f}" if isinstance(r.get(c), float) and c != "train_min"
                                else str(r.get(c)) for c in columns) + " |" for r in rows]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, f"{args.recipe}.md"), "w") as handle:
        handle.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
