"""Transfer learning: a trained run carried over to a user's own few hundred molecules.

``finetune(base, data, out)`` is what ``seqvae finetune BASE NEW_DATA --out RUN`` runs:

1. reads NEW_DATA and makes its molecules writable by BASE (``seqvae.data.adaptation``): salts
   and solvents cut to the largest fragment, stereo dropped where BASE writes none; what BASE
   still cannot write (a token it lacks, longer than its ``max_len``) is left out and counted,
   or, with ``extend_vocab``, the vocabulary grows to write it (``grown_codec``) and the model
   with it (``seqvae.model.vocabulary_growth``);
2. trains a new run in ``out`` from BASE's weights (``workflows.train`` with ``init``): a share
   of the molecules (``holdout``) is held out, validated every epoch for early stopping on its
   ELBO, and the run ends with the weights of its best validation (``train.restore_best``);
3. keeps the aggregate posterior of the new molecules as the run's prior, so that ``sample``
   draws from *their* distribution (no SavedModel is written: ``seqvae export`` when needed).

``out`` is a run directory like any other: sample, encode, evaluate, export and explore work on
it. ``out/finetune/`` holds the molecules it trained on (``molecules.smi``), the held-out ones
(``held_out.smi``, the default test set of ``seqvae evaluate out``) and the rest
(``fine_tuning.smi``, its default training set for Novelty); ``out/finetune.json`` says where
it came from.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass
from typing import Callable

from seqvae import files
from seqvae.data import adaptation, sources
from seqvae.data.batching import validation_split
from seqvae.errors import SeqvaeError
from seqvae.messages import note
from seqvae.run import FINETUNE_FILE, finetune_files, finetune_record


@dataclass(frozen=True)
class FinetuneSettings:
    """How ``finetune`` trains on a small set (defaults measured by ``bench/finetune.py``)."""

    holdout: float = 0.1  # share of the molecules held out for early stopping and the report
    epochs: int = 20  # passes over the rest; at least min_steps and at most max_steps steps
    min_steps: int = 300  # a few hundred molecules still get this many steps
    max_steps: int = 1000  # a large set stops here (0: no cap); early stopping may stop sooner
    batch_size: int = 64  # sequences per step (BASE's if smaller)
    learning_rate: float = 1e-3  # Adam's, cosine-decayed to a tenth over the planned steps
    patience: int = 5  # validations (one an epoch) without a better held-out loss before stopping
    extend_vocab: bool = False  # grow BASE's vocabulary (and max_len) to write every molecule
    max_len: int = 0  # with extend_vocab: the longest a grown run writes (0: NEW_DATA's longest)
    strip: bool = True  # cut salts and solvents to the largest fragment
    column: str = ""  # the SMILES column of a CSV NEW_DATA ("": BASE's data.column)
    seed: int = 0  # seeds the held-out split, the data order and the noise
    overrides: tuple[str, ...] = ()  # KEY=VALUE config overrides applied last (--set)

    def __post_init__(self) -> None:
        if not 0.0 < self.holdout < 0.5:
            raise SeqvaeError(f"holdout must be in (0, 0.5), got {self.holdout}")
        for name in ("epochs", "min_steps", "batch_size", "patience"):
            if getattr(self, name) < 1:
                raise SeqvaeError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_steps < 0 or self.max_len < 0 or not self.learning_rate > 0:
            raise SeqvaeError("max_steps and max_len must be >= 0 and learning_rate > 0")


def planned_steps(settings: FinetuneSettings, train_size: int, batch_size: int) -> tuple[int, int]:
    """``(steps, steps per epoch)`` of a fine-tuning on ``train_size`` sequences: ``epochs``
    epochs, at least ``min_steps``, at most ``max_steps``."""
    per_epoch = max(1, math.ceil(train_size / batch_size))
    steps = max(settings.epochs * per_epoch, settings.min_steps)
    return (min(steps, settings.max_steps) if settings.max_steps else steps), per_epoch


def finetune_config(base_config, settings: FinetuneSettings, train_size: int):
    """BASE's config with the fine-tuning's data and training sections: a constant KL weight
    (BASE's final one: the latent space is already laid out), the held-out share validated
    each epoch, early stopping with the best weights kept, the aggregate posterior as the prior."""
    batch = min(settings.batch_size, base_config.train.batch_size)
    steps, per_epoch = planned_steps(settings, train_size, batch)
    t, d, m = base_config.train, base_config.data, base_config.model
    config = dataclasses.replace(
        base_config,
        data=dataclasses.replace(d, limit=0, subset="first", validation_fraction=settings.holdout,
                                 column=settings.column or d.column, properties="",
                                 streaming=False, max_len=0),
        train=dataclasses.replace(
            t, batch_size=batch, epochs=0, max_steps=steps, time_budget=0.0,
            learning_rate=settings.learning_rate, lr_schedule="cosine",
            lr_min=settings.learning_rate / 10, warmup_steps=0, kl_schedule="constant",
            kl_weight_start=t.kl_weight_end, kl_anneal_fraction=0.0, kl_start_step=0,
            patience=settings.patience, validate_every=per_epoch, restore_best=True,
            checkpoint_every=per_epoch, keep_checkpoints=2, log_every=max(1, per_epoch // 2),
            seed=settings.seed, export_at_end=False, scheduled_sampling=0.0),
        model=dataclasses.replace(m, prior="aggregate"))
    return config.with_overrides(list(settings.overrides))


def adapt_data(base, data, settings: FinetuneSettings):
    """``(adapted molecules, codec)``: NEW_DATA made writable by BASE (``adaptation.adapt``)
    under BASE's codec, or with ``extend_vocab`` under one grown to write all of it (stereo
    kept; the length up to ``settings.max_len``, or NEW_DATA's longest; a conv or dense
    encoder reads a fixed length, so theirs stays)."""
    seqs = sources.read_sequences(data, settings.column or base.config.data.column)
    if not settings.extend_vocab:
        return adaptation.adapt(seqs, base.codec, strip=settings.strip), base.codec
    cleaned = adaptation.clean(seqs, base.codec.molecules, strip=settings.strip)
    fixed_length = base.config.model.encoder in ("conv", "dense")
    codec = adaptation.grown_codec(base.codec, cleaned.texts,
                                   base.max_len if fixed_length else settings.max_len)
    return adaptation.encode(cleaned, codec), codec


def finetune(base_dir: str, data, out: str, settings: FinetuneSettings = FinetuneSettings(), *,
             resume: bool = False, report: Callable[[str], None] | None = None) -> dict:
    """Fine-tunes the run ``base_dir`` on ``data`` into the new run ``out``.

    Args:
      base_dir: a trained run directory.
      data: the new molecules: a file (``.smi``, ``.csv`` with ``settings.column``, ...) or
        ``moses:SPLIT``.
      out: the new run directory (continued with ``resume``).
      settings: ``FinetuneSettings``.
      resume: continue an interrupted fine-tuning in ``out`` (same BASE, data and settings).
      report: gets one line per stage (default: ``seqvae.messages.note``).

    Returns:
      ``{"summary": training summary, "adapted": AdaptedMolecules, "run_dir": out,
      "files": {"molecules", "held_out", "fine_tuning"}, "added_tokens": [...],
      "seconds": wall time}``.

    Raises:
      SeqvaeError: BASE unreadable, no molecule left to train on, ``out`` holding another run.
    """
    from seqvae.model import vocabulary_growth
    from seqvae.run import load_run
    from seqvae.workflows import train

    report = report or note
    started = time.monotonic()
    base = load_run(base_dir)
    adapted, codec = adapt_data(base, data, settings)
    report(f"seqvae finetune: {adaptation.describe(adapted)}")
    minimum = max(10, math.ceil(2 / settings.holdout))
    if len(adapted.texts) < minimum:
        raise SeqvaeError(f"{adapted.source}: {len(adapted.texts)} molecules left to train on, "
                          f"fewer than {minimum}" + ("" if settings.extend_vocab else
                                                     "; --extend-vocab may keep more"))
    added = codec.vocab.tokens[len(base.vocab):]
    if added or codec.max_len != base.max_len:
        report(f"seqvae finetune: vocabulary grown by {len(added)} tokens "
               f"({' '.join(added[:20])}{' ...' if len(added) > 20 else ''}), max_len "
               f"{base.max_len} -> {codec.max_len}")
    train_rows, held_rows = validation_split(len(adapted.texts), settings.holdout, settings.seed)
    paths = _write_molecules(out, adapted.texts, train_rows, held_rows, resume)
    config = finetune_config(base.config, settings, len(train_rows))
    record = {"base": base.name if base.pretrained else os.path.abspath(base.run_dir),
              "data": str(data),
              "base_weights": base_weights_checksum(base), "settings": dataclasses.asdict(settings),
              "added_tokens": added, "max_len": codec.max_len,
              "molecules": len(adapted.texts), "read": adapted.read,
              "stripped": adapted.stripped, "without_stereo": adapted.without_stereo,
              "left_out": {kind: len(rows) for kind, rows in adapted.left_out.items()},
              "files": {name: os.path.relpath(path, out) for name, path in paths.items()}}
    _check_record(out, record, resume)
    analogs = vocabulary_growth.analog_ids(base.vocab.tokens, codec.vocab.tokens,
                                           smiles=codec.tokenizer == "smiles")

    def from_base(model) -> None:
        vocabulary_growth.transfer(base.model.weights, model.weights, len(base.vocab), analogs)

    steps = config.train.max_steps
    report(f"seqvae finetune: {len(train_rows):,} molecules to train on, {len(held_rows):,} held "
           f"out; up to {steps:,} steps of {config.train.batch_size} from {base.name}'s "
           f"weights at learning rate {config.train.learning_rate:g}, stopping after "
           f"{settings.patience} epochs without a better held-out loss")
    summary = train(config, out, paths["molecules"], resume=resume, codec=codec, init=from_base,
                    report=report)
    return {"summary": summary, "adapted": adapted, "run_dir": out, "files": paths,
            "added_tokens": added, "seconds": time.monotonic() - started}


def base_weights_checksum(base) -> str:
    """The checksum of BASE's weights (``training.steps.weights_checksum``), kept in
    ``finetune.json``: a resumed fine-tuning must start from the same BASE."""
    from seqvae.training.steps import weights_checksum

    return weights_checksum(base.model)


def _write_molecules(out: str, texts: list[str], train_rows, held_rows, resume: bool) -> dict:
    """Writes ``out/finetune/{molecules,held_out,fine_tuning}.smi`` (``run.finetune_files``);
    their paths."""
    if not resume and os.path.exists(os.path.join(out, "run.json")):
        raise SeqvaeError(f"{out}: already holds a run; add --resume to continue it or choose "
                          "another --out")
    paths = finetune_files(out, check=False)
    os.makedirs(os.path.dirname(paths["molecules"]), exist_ok=True)
    for name, rows in (("molecules", range(len(texts))), ("held_out", held_rows),
                       ("fine_tuning", train_rows)):
        files.write_text_atomic(paths[name], "".join(f"{texts[i]}\n" for i in rows))
    return paths


def _check_record(out: str, record: dict, resume: bool) -> None:
    """Writes ``out/finetune.json``; resuming, refuses another BASE, data or settings."""
    stored = finetune_record(out) if resume else None
    if stored is not None:
        changed = [key for key in ("base", "data", "base_weights", "settings")
                   if stored.get(key) != json.loads(json.dumps(record[key]))]
        if changed:
            raise SeqvaeError(f"{out}: was fine-tuned with another {', '.join(changed)}; "
                              "resume with the same BASE, data and options, or choose another --out")
        return
    files.write_text_atomic(os.path.join(out, FINETUNE_FILE), json.dumps(record, indent=2) + "\n")


def compare_with_base(run_dir: str, n: int = 1000, seed: int = 0, include_fcd: bool = True,
                      progress: Callable[[str], None] | None = None) -> dict:
    """A fine-tuned run beside its BASE (``evaluation.comparison.compare_runs``): ``n``
    samples of each scored against the molecules the fine-tuning held out (FCD, SNN, Frag,
    Scaf) and those it was fine-tuned on (Novelty)."""
    from seqvae.evaluation.comparison import compare_runs
    from seqvae.run import load_run

    record = finetune_record(run_dir)
    if record is None:
        raise SeqvaeError(f"{run_dir}: not a fine-tuned run (no {FINETUNE_FILE})")
    base_dir, paths = record["base"], finetune_files(run_dir)
    test, train = (sources.read_sequences(paths[name]).texts for name in ("held_out", "fine_tuning"))
    return compare_runs({"base": load_run(base_dir), "fine-tuned": load_run(run_dir)}, test,
                        train, n=n, seed=seed, include_fcd=include_fcd, progress=progress)
