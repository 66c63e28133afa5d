"""Ships a finished run inside seqvae as ``seqvae/pretrained/NAME/``, used as ``pretrained:NAME``.

    python scripts/ship_pretrained.py RUN_DIR NAME [--float16] [--prior-float16]
        [--prior-kernels N] [--reference N] [--metrics FILE] [--command TEXT] [--cpu TEXT]
        [--train-hours H]

It writes (see ``seqvae.pretrained``) run.json, config.json and vocab.json as they are, the
metrics log up to the shipped step (the training curves of ``seqvae evaluate``'s report); the
weights of the run's latest checkpoint alone (``checkpoints/ckpt-STEP``, no optimizer state;
``--float16`` stores them as float16, restored as float32 on load); ``latent_prior.npz``
(``--prior-kernels N`` keeps N of the aggregate posterior's kernels, drawn at random with
``--seed``; ``--float16`` or ``--prior-float16`` stores its arrays as float16); the property
head when the run has one; with ``--reference N``, ``properties/reference.npz``: the RDKit
properties of the first N training molecules (``seqvae sample --where`` steers by them); and
``MANIFEST.json``: the data, the command that trained the run
(``--command``, else the equivalent ``seqvae train DATA --config config.json``), the CPU
(``--cpu``, else this machine's) and the training time (``--train-hours``, else the sum of the
run's ``metrics.jsonl`` segments), the metrics of ``--metrics`` (a flat JSON object, or the
``metrics.json`` of ``seqvae evaluate``), and the sha256 and size of every file.

The folder is built beside its final place, loaded as ``pretrained:NAME`` is loaded (checksums
included) and its weights compared with the run's, then renamed into place; the script prints
the sizes against the budget of the weights and the prior (``BUDGET_MB``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

BUDGET_MB = 30.0  # weights + prior of a shipped model (the budget)
RUN_FILES = ("run.json", "config.json", "vocab.json")


def cpu_description() -> str:
    """This machine's CPU model and core count, as /proc/cpuinfo and os.cpu_count() give them."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def training_seconds(run_dir: str, step: int) -> float | None:
    """Training seconds up to ``step`` from the run's metrics log (each resumed segment logs its
    time from zero again: the segments are added); None without a log."""
    from seqvae.files import read_jsonl

    total, offset, last = None, 0.0, 0.0
    for record in read_jsonl(os.path.join(run_dir, "metrics.jsonl")):
        if record.get("kind") == "step" and "train_s" in record and record["step"] <= step:
            if record["train_s"] < last:
                offset += last
            last = record["train_s"]
            total = offset + last
    return total


def read_metrics(path: str | None) -> dict:
    """The metrics to record: a flat ``{name: value}`` file as it is, or from the
    ``metrics.json`` of ``seqvae evaluate`` its generation metrics, the reconstruction rate, the
    IW-NLL and the number of samples."""
    if not path:
        return {}
    with open(path, encoding="utf-8") as handle:
        given = json.load(handle)
    if "generation" not in given:
        return given
    metrics = {name: value for name, value in (given.get("generation") or {}).items()
               if isinstance(value, (int, float))}
    if given.get("reconstruction"):
        metrics["reconstruction"] = given["reconstruction"].get("reconstruction")
    if given.get("vae_quality"):
        metrics["IW-NLL"] = given["vae_quality"].get("nll_iw")
    metrics["samples"] = given.get("n_samples")
    return {name: value for name, value in metrics.items() if value is not None}


def ship_prior(run, folder: str, kernels: int | None, float16: bool, seed: int) -> dict | None:
    """Writes the run's prior into ``folder`` (fewer kernels, float16 when asked); what the
    manifest says of it, or None when the run has none."""
    import numpy as np

    from seqvae import latent_prior

    if not os.path.exists(os.path.join(run.run_dir, latent_prior.FILENAME)):
        return None
    prior = latent_prior.load(run.run_dir)
    if not isinstance(prior, latent_prior.AggregatePrior):
        shutil.copy(os.path.join(run.run_dir, latent_prior.FILENAME), folder)
        return {"kind": f"fitted mixture of {prior.components} Gaussian(s)", "dtype": "float64"}
    total = prior.components
    rows = np.arange(total)
    if kernels and kernels < total:
        rows = np.sort(np.random.default_rng(seed).choice(total, kernels, replace=False))
    dtype = np.float16 if float16 else np.float32
    kept = latent_prior.AggregatePrior(prior.means[rows].astype(dtype),
                                       prior.scales[rows].astype(dtype), prior.widen, len(rows),
                                       prior.source)
    latent_prior.save(folder, kept)
    return {"kind": f"aggregate posterior of {prior.source}, each q(z|x) widened "
                    f"{prior.widen:g}x", "kernels": int(len(rows)), "of": int(total),
            "dtype": np.dtype(dtype).name}


def ship_reference(run, folder: str, count: int) -> None:
    """Writes ``properties/reference.npz``: every RDKit property of the first ``count`` molecules
    of the run's training data, the molecules ``seqvae sample --where`` steers by (read as the
    cache of a run of one's own is, so the first conditioned search computes nothing)."""
    from seqvae.data.properties import RDKIT_PROPERTIES
    from seqvae.property_fit import CACHE_DIR, property_table, save_table

    data = run.info.get("data_source")
    if data is None:
        raise SystemExit(f"{run.run_dir}: run.json names no training data for --reference")
    table = property_table(run, data, RDKIT_PROPERTIES, count, cache=False)
    os.makedirs(os.path.join(folder, CACHE_DIR))
    save_table(os.path.join(folder, CACHE_DIR, "reference.npz"), table)


def build(args, folder: str) -> tuple[object, dict]:
    """Writes the shipped files of ``args.run_dir`` into ``folder``; the loaded run and the
    manifest's description (without the file list)."""
    from seqvae import __version__
    from seqvae.checkpoints import checkpoint_step, save_model_only
    from seqvae.property_fit import HEAD_DIR
    from seqvae.run import load_run, truncate_metrics

    run = load_run(args.run_dir, args.checkpoint)
    if run.pretrained:
        raise SystemExit(f"{args.run_dir}: already a shipped model ({run.name})")
    step = checkpoint_step(run.checkpoint)
    os.makedirs(folder)
    for name in RUN_FILES:
        shutil.copy(os.path.join(run.run_dir, name), folder)
    if os.path.exists(os.path.join(run.run_dir, "metrics.jsonl")):  # the report's curves
        shutil.copy(os.path.join(run.run_dir, "metrics.jsonl"), folder)
        truncate_metrics(os.path.join(folder, "metrics.jsonl"), step)
    save_model_only(run.model, os.path.join(folder, "checkpoints"), step, float16=args.float16)
    prior = ship_prior(run, folder, args.prior_kernels, args.float16 or args.prior_float16,
                       args.seed)
    if os.path.isdir(os.path.join(run.run_dir, HEAD_DIR)):
        shutil.copytree(os.path.join(run.run_dir, HEAD_DIR), os.path.join(folder, HEAD_DIR))
    if args.reference:
        ship_reference(run, folder, args.reference)
    info = run.info
    trained_on = info.get("data_source") or "?"
    if "train_size" in info:
        trained_on += (f" ({info['train_size']:,} training and {info.get('validation_size', 0):,} "
                       "validation sequences)")
    seconds = (args.train_hours * 3600 if args.train_hours is not None
               else training_seconds(run.run_dir, step))
    command = args.command or (f"seqvae train {info.get('data_source', 'DATA')} --config "
                               f"config.json --out runs/{args.name}")
    return run, {"name": args.name, "description": args.description or "",
                 "trained_on": trained_on, "command": command,
                 "training": {"steps": args.train_steps or step, "seconds": seconds,
                              "cpu": args.cpu or cpu_description()},
                 "metrics": read_metrics(args.metrics), "metrics_command": args.metrics_command,
                 "weights": {"checkpoint": f"checkpoints/ckpt-{step}",
                             "dtype": "float16" if args.float16 else "float32"},
                 "prior": prior, "seqvae_version": __version__}


def check(run, folder: str) -> float:
    """Loads the shipped ``folder`` as ``pretrained:NAME`` is loaded (checksums included); the
    largest difference between its weights and the run's."""
    import numpy as np

    from seqvae import pretrained
    from seqvae.run import load_run

    pretrained.verify(folder)
    shipped = load_run(folder)
    return max((float(np.max(np.abs(a.numpy() - b.numpy()), initial=0.0))
                for a, b in zip(run.model.weights, shipped.model.weights)), default=0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a finished run directory")
    parser.add_argument("name", help="the model's name: used as pretrained:NAME")
    parser.add_argument("--root", help="where shipped models live (default: seqvae's own "
                        "seqvae/pretrained/, or $SEQVAE_PRETRAINED_DIR)")
    parser.add_argument("--checkpoint", help="a checkpoint prefix of the run (default: latest)")
    parser.add_argument("--float16", action="store_true",
                        help="store the weights and the prior as float16 (restored as float32)")
    parser.add_argument("--prior-float16", action="store_true",
                        help="store only the prior as float16 (the weights stay float32)")
    parser.add_argument("--prior-kernels", type=int, metavar="N",
                        help="keep N of the aggregate posterior's kernels, drawn at random")
    parser.add_argument("--seed", type=int, default=0, help="draws the kept kernels")
    parser.add_argument("--reference", type=int, metavar="N", default=0,
                        help="ship the RDKit properties of the first N training molecules "
                        "(what seqvae sample --where steers by)")
    parser.add_argument("--metrics", help="JSON of the metrics the model reached (flat, or "
                        "seqvae evaluate's metrics.json)")
    parser.add_argument("--metrics-command", help="the command that measured them")
    parser.add_argument("--command", help="the command that trained the run (default: the "
                        "equivalent seqvae train --config config.json)")
    parser.add_argument("--cpu", help="the CPU it was trained on (default: this machine's)")
    parser.add_argument("--train-hours", type=float, help="training time (default: from the "
                        "run's metrics.jsonl)")
    parser.add_argument("--train-steps", type=int, help="training steps (default: the "
                        "checkpoint's; give the sum where the run continued another's, --init)")
    parser.add_argument("--description", help="one line on what the model is")
    parser.add_argument("--force", action="store_true", help="replace a shipped model of NAME")
    args = parser.parse_args(argv)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from seqvae import pretrained
    from seqvae.errors import SeqvaeError

    root = os.path.abspath(args.root) if args.root else pretrained.root()
    final = os.path.join(root, args.name)
    if args.name != os.path.basename(args.name) or args.name.startswith((".", "_")):
        parser.error(f"NAME must be a plain folder name, got {args.name!r}")
    if os.path.exists(final) and not args.force:
        parser.error(f"{final} exists; add --force to replace it")
    staging = os.path.join(root, f".{args.name}.shipping")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        run, info = build(args, staging)
        manifest = pretrained.write_manifest(staging, info)
        difference = check(run, staging)  # float16 weights out of range would not restore
        if os.path.exists(final):
            shutil.rmtree(final)
        os.replace(staging, final)
    except SeqvaeError as error:
        print(f"ship_pretrained: error: {error}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    sizes = {name: entry["bytes"] for name, entry in manifest["files"].items()}
    weights = sum(size for name, size in sizes.items() if name.startswith("checkpoints/"))
    prior = sizes.get("latent_prior.npz", 0)
    for name, size in sorted(sizes.items()):
        print(f"{size / 1e6:9.2f} MB  {name}")
    print(f"{sum(sizes.values()) / 1e6:9.2f} MB  in all, {final}")
    within = (weights + prior) / 1e6 <= BUDGET_MB
    print(f"weights + prior: {(weights + prior) / 1e6:.2f} MB ({'within' if within else 'OVER'} "
          f"the {BUDGET_MB:g} MB budget); loaded back (checksums checked), its weights differ "
          f"from the run's by at most {difference:.3g}; use it as pretrained:{args.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
