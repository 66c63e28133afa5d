"""The learning curve of a long run (the pretrained MOSES model): at each kept checkpoint, the
quality of what it samples and how much it reconstructs.

For each checkpoint ``ckpt-S`` of ``RUN`` (or those given with ``--steps``), a view of the run at
that step is made in ``OUT/step-S`` (the run's files and that checkpoint), and

- its prior is the aggregate posterior of ``model.prior_encodings`` (50,000) MOSES training
  molecules drawn at random, as the run keeps when training ends (``seqvae fit-prior
  --aggregate``);
- ``--samples`` molecules are sampled as ``seqvae sample`` samples them (by rejection under the
  grammar): validity, unique@10k, novelty against MOSES train, and FCD against MOSES's own
  ChemNet statistics of its test split (needs ``pip install 'seqvae[fcd]'``);
- ``--recon`` MOSES test molecules drawn at random are reconstructed greedily from the means of
  q(z|x) (exact canonical SMILES).

A language-model run (``model.z_conditioning=none``, the same-budget control) has no z to fit a
prior to or reconstruct from: it is sampled from the standard prior (which its decoder ignores).

Its table (``OUT/curve.md``) has the step, the training hours so far (the run's own log) and the
figures; rows measured before are read back from ``OUT/curve.json``.

    python bench/pretrained_curve.py runs/pretrained_moses --out runs/pretrained_curve
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # learning_curve beside it

from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up


def checkpoint_steps(run_dir: str) -> list[int]:
    names = glob.glob(os.path.join(run_dir, "checkpoints", "ckpt-*.index"))
    return sorted(int(re.search(r"ckpt-(\d+)\.index$", name).group(1)) for name in names)


def view_at(run_dir: str, step: int, out: str) -> str:
    """``out/step-S``: the run's description and its checkpoint of step S, alone."""
    view = os.path.join(out, f"step-{step}")
    if os.path.exists(os.path.join(view, "checkpoints", "checkpoint")):
        return view
    os.makedirs(os.path.join(view, "checkpoints"), exist_ok=True)
    for name in ("run.json", "config.json", "vocab.json", "metrics.jsonl"):
        shutil.copy(os.path.join(run_dir, name), view)
    for path in glob.glob(os.path.join(run_dir, "checkpoints", f"ckpt-{step}.*")):
        shutil.copy(path, os.path.join(view, "checkpoints"))
    with open(os.path.join(view, "checkpoints", "checkpoint"), "w") as handle:
        handle.write(f'model_checkpoint_path: "ckpt-{step}"\n'
                     f'all_model_checkpoint_paths: "ckpt-{step}"\n')
    return view


def training_hours(run_dir: str, step: int) -> float:
    """Training time up to ``step``: that of the last logged step at or before it
    (``learning_curve.checkpoint_times``)."""
    from learning_curve import checkpoint_times

    times = checkpoint_times(run_dir)
    return max((seconds for logged, seconds in times.items() if logged <= step), default=0.0) / 3600


def sample_quality(run, samples: int, train: set, temperature: float = 1.0,
                   prior: str | None = None, snn: bool = False) -> dict:
    """``samples`` molecules drawn as ``seqvae sample`` draws them (by rejection under the
    grammar; ``prior`` and ``temperature`` as its options): validity, unique@10k, novelty
    against ``train``, FCD against MOSES's own test statistics (and SNN/Test with ``snn``), the
    share rejected."""
    from seqvae import inference

    stats: dict = {}
    drawn = inference.sample(run, samples, seed=0, stats=stats, temperature=temperature,
                             prior=prior)
    return {**drawn_quality(drawn, train, snn), "rejected": stats.get("rejected", 0.0),
            "samples": samples}


def test_reference():
    """MOSES test's statistics as ``seqvae evaluate`` uses them (its fingerprints for SNN/Test;
    from the user cache, then kept in this process)."""
    from seqvae.evaluation.moses_files import moses_reference

    return moses_reference("test", include_fcd=False)


def valid_molecules(drawn: list[str]) -> list[str]:
    """The canonical SMILES of the texts RDKit parses, in order."""
    from rdkit import rdBase

    from seqvae.data.chemistry import canonical_smiles

    with rdBase.BlockLogs():
        return [text for text in map(canonical_smiles, drawn) if text is not None]


def drawn_quality(drawn: list[str], train: set, snn: bool = False) -> dict:
    """Of sampled texts: the share RDKit parses, unique@10k, novelty against ``train`` and FCD
    against MOSES's own test statistics (and with ``snn``, SNN against MOSES test), all of the
    valid ones."""
    from seqvae.evaluation import chemnet, metrics
    from seqvae.evaluation.moses_files import _moses_fcd_statistics

    valid = valid_molecules(drawn)
    reference = _moses_fcd_statistics("test")
    fcd = chemnet.frechet_distance(chemnet.chemnet_statistics(valid),
                                   (reference["mean"], reference["covariance"]))
    return {"valid": len(valid) / max(len(drawn), 1),
            "unique@10k": metrics.fraction_unique(valid, 10_000, check_validity=False),
            "novelty": metrics.novelty(valid, train), "fcd_test": float(fcd),
            **({"snn_test": metrics.snn(valid, test_reference())} if snn else {})}


def measure(view: str, samples: int, recon: int) -> dict:
    import numpy as np

    from seqvae import inference
    from seqvae.config import LANGUAGE_MODEL
    from seqvae.data.sources import random_subset, read_sequences
    from seqvae.run import load_run

    started = time.monotonic()
    run = load_run(view)
    molecules = read_sequences("moses:train")
    train = set(molecules.texts)
    if run.config.model.z_conditioning == LANGUAGE_MODEL:  # z unused: nothing to fit
        row = sample_quality(run, samples, train, prior="standard")
        return {**row, "recon_greedy": None, "token_accuracy": None,
                "seconds": round(time.monotonic() - started), "recon_molecules": 0}
    kernels = run.config.model.prior_encodings
    inference.fit_prior(run, random_subset(molecules, kernels, seed=0).texts, limit=0,
                        aggregate=True)
    row = sample_quality(run, samples, train)
    test = random_subset(read_sequences("moses:test"), recon, seed=0).texts
    greedy = inference.reconstruct(run, test, num_samples=0)
    return {**row, "recon_greedy": greedy["exact_match_mean_z"],
            "token_accuracy": greedy["token_accuracy_mean_z"],
            "seconds": round(time.monotonic() - started), "recon_molecules": int(np.size(test))}


def _percent(value) -> str:
    return "n/a (no z)" if value is None else f"{100 * value:.1f}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", default="", help="checkpoint steps to measure (default: all)")
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--recon", type=int, default=1_000)
    args = parser.parse_args()

    from seqvae import messages

    messages.show_on_stderr()
    os.makedirs(args.out, exist_ok=True)
    table_path = os.path.join(args.out, "curve.json")
    rows = json.load(open(table_path)) if os.path.exists(table_path) else {}
    steps = ([int(s) for s in args.steps.split(",") if s] if args.steps
             else checkpoint_steps(args.run_dir))
    for step in steps:
        if str(step) in rows:
            continue
        row = measure(view_at(args.run_dir, step, args.out), args.samples, args.recon)
        row["train_hours"] = round(training_hours(args.run_dir, step), 2)
        rows[str(step)] = row
        with open(table_path, "w") as handle:
            json.dump(rows, handle, indent=1)
        print(f"step {step}: {row}", file=sys.stderr, flush=True)
    lines = ["| step | training hours | valid | unique@10k | novelty | FCD/Test | rejected | "
             "greedy recon | token accuracy |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for step in sorted(rows, key=int):
        r = rows[step]
        lines.append(f"| {int(step):,} | {r['train_hours']:.2f} | {r['valid']:.4f} | "
                     f"{r['unique@10k']:.4f} | {r['novelty']:.3f} | {r['fcd_test']:.2f} | "
                     f"{100 * r['rejected']:.1f}% | {_percent(r['recon_greedy'])} | "
                     f"{_percent(r['token_accuracy'])} |")
    with open(os.path.join(args.out, "curve.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
