"""Training that starts from another run's weights: ``seqvae train DATA --out NEW --init BASE``.

The new run is a run like any other (its own config, schedule, optimizer, checkpoints and
``--resume``), but its first step starts from BASE's weights (a run directory or
``pretrained:NAME``) instead of random ones, and it writes its data with BASE's vocabulary and
length. It is how a long run is continued under a new recipe (e.g. a higher KL weight for the
last few thousand steps) without touching BASE; ``seqvae finetune`` is the version for a user's
few hundred molecules (held-out early stopping, salts stripped, a before/after report).

What shapes the weights must stay BASE's: the model section of the new config may differ from
BASE's only in how it samples (``SAMPLING_FIELDS``). ``NEW/init.json`` records BASE and the
checksum of its weights, and a resumed run must name the same BASE.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from seqvae import files
from seqvae.errors import SeqvaeError

INIT_FILE = "init.json"
# Model fields that change how a run samples, not its weights: free to differ from BASE's.
SAMPLING_FIELDS = ("prior", "prior_widen", "prior_encodings", "rejection_rounds")


def base_config(base_dir: str):
    """BASE's config: what ``seqvae train --init BASE`` starts from when no ``--preset`` or
    ``--config`` is given (then ``--set`` and the flags apply to it)."""
    from seqvae.run import read_run_files

    return read_run_files(base_dir).config


def weight_differences(base_model, model) -> list[str]:
    """The model fields (``ModelConfig``) of ``model`` that differ from ``base_model``'s and
    shape the weights (all but ``SAMPLING_FIELDS``), as ``name BASE -> NEW``."""
    old, new = dataclasses.asdict(base_model), dataclasses.asdict(model)
    return [f"model.{name} {old[name]!r} -> {new[name]!r}" for name in sorted(old)
            if name not in SAMPLING_FIELDS and old[name] != new.get(name)]


def warm_start(base_dir: str, config, out: str):
    """Checks that ``config`` can start from BASE's weights and records BASE in ``out``.

    Args:
      base_dir: BASE, a run directory or ``pretrained:NAME``.
      config: the new run's ``Config``.
      out: the new run's directory (created when missing).

    Returns:
      ``(codec, init)``: BASE's ``TextCodec`` (the new run writes its data with it) and
      ``init(model)``, which sets a model of that config to BASE's weights (``workflows.train``'s
      ``init``; the training loop calls it only for a run that has no checkpoint yet).

    Raises:
      SeqvaeError: a model field that shapes the weights differs from BASE's; ``out`` was
        started from another BASE (or other weights of it).
    """
    from seqvae.model import vocabulary_growth
    from seqvae.run import load_run
    from seqvae.training.steps import weights_checksum

    base = load_run(base_dir)
    differences = weight_differences(base.config.model, config.model)
    if differences:
        raise SeqvaeError(f"--init {base.name}: the new run must keep its model to start from its "
                          f"weights, but {'; '.join(differences)} (leave --preset and "
                          f"--config out to start from its config)")
    record = {"init": base.name if base.pretrained else os.path.abspath(base.run_dir),
              "weights_checksum": weights_checksum(base.model)}
    path = os.path.join(out, INIT_FILE)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            stored = json.load(handle)
        if stored != record:
            raise SeqvaeError(f"{out}: started from {stored.get('init')} (weights "
                              f"{stored.get('weights_checksum')}), not from {record['init']} "
                              f"(weights {record['weights_checksum']}); resume it with the same "
                              "--init or choose another --out")
    else:
        os.makedirs(out, exist_ok=True)
        files.write_text_atomic(path, json.dumps(record, indent=1) + "\n")

    def init(model) -> None:  # the same vocabulary: nothing grows; a head BASE lacks starts anew
        vocabulary_growth.transfer(base.model.weights, model.weights, len(base.vocab),
                                   np.zeros(0, np.int64), keep_missing=True)

    return base.codec, init
