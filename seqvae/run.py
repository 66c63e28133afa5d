"""The self-describing run directory: what is in it, how it is written, and how it is loaded.

Layout::

    RUN_DIR/
      run.json          what this directory is (format, seqvae version, vocab size, max length)
      config.json       the Config of the run
      vocab.json        the Vocabulary (special tokens first)
      checkpoints/      tf.train.CheckpointManager: model, optimizer, step, epoch, batch in epoch
      metrics.jsonl     one JSON object per logging step and per epoch
      tensorboard/      TensorBoard event files
      .lock             held by the training process

``pretrained:NAME`` names a model that ships inside seqvae (``seqvae.pretrained``): a folder of
the same layout with one model-only checkpoint, read-only. ``read_run_files`` checks its files
against its manifest; what commands write beside a run (``Run.output_dir``) goes to the user's
cache instead, and what would change the run refuses (``Run.check_writable``).

Every JSON file is written to a temporary file and renamed over the old one, so a crash never
leaves a half-written file; checkpoints are written by TensorFlow the same way (the ``checkpoint``
index names only complete checkpoints).
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass, field
from typing import Any

from seqvae import __version__
from seqvae.config import Config
from seqvae.data.preparation import TextCodec
from seqvae.data.tokenizers import Tokenizer, get_tokenizer
from seqvae.data.vocabulary import Vocabulary
from seqvae import pretrained
from seqvae.errors import SeqvaeError
from seqvae.files import read_jsonl, write_json_atomic, write_text_atomic

RUN_FORMAT = "seqvae-run-1"


def truncate_metrics(path: str, step: int) -> None:
    """Drops metric lines logged after ``step`` (work a resumed run will redo)."""
    kept = [r for r in read_jsonl(path) if r.get("step", 0) <= step]
    write_text_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))


class RunLock:
    """An exclusive ``flock`` on ``RUN_DIR/.lock``: one training process per run directory."""

    def __init__(self, run_dir: str):
        self.path = os.path.join(run_dir, ".lock")
        self.handle = None

    def __enter__(self) -> "RunLock":
        self.handle = open(self.path, "a+")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.handle.seek(0)
            owner = self.handle.read().strip() or "unknown"
            self.handle.close()
            raise SeqvaeError(f"{os.path.dirname(self.path)}: another seqvae process (pid {owner}) "
                              "is training in this run directory") from None
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(str(os.getpid()))
        self.handle.flush()
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


@dataclass
class Run:
    """Everything a run directory holds, loaded: what is needed to sample, encode or resume."""

    run_dir: str
    config: Config
    vocab: Vocabulary
    tokenizer: Tokenizer
    info: dict
    model: Any = None  # SequenceVAE with the latest checkpoint's weights (load_run)
    raw_output: bool = False  # decoded molecules as the model writes them (Kekule SMILES for a
    #   Kekule run), not as RDKit's canonical SMILES (the default; --raw)
    compiled: dict = field(default_factory=dict, repr=False, compare=False)  # seqvae.inference's
    pretrained: str | None = None  # NAME of a model that ships with seqvae (read-only), or None
    checkpoint: str | None = None  # the checkpoint prefix the model was restored from (load_run)

    @property
    def max_len(self) -> int:
        return self.info["max_len"]

    @property
    def name(self) -> str:
        """How the user names the run: ``pretrained:NAME``, or its directory."""
        return f"{pretrained.PREFIX}{self.pretrained}" if self.pretrained else self.run_dir

    def output_dir(self, *parts: str) -> str:
        """Where a command keeps what it writes beside the run (a report, property and explorer
        caches): ``RUN_DIR/PARTS``, or for a model that ships with seqvae, which is read-only,
        the user's cache (``seqvae.pretrained.cache_folder``). Not created here."""
        if self.pretrained:
            return pretrained.cache_folder(self.pretrained, *parts)
        return os.path.join(self.run_dir, *parts)

    def check_writable(self, action: str) -> None:
        """Refuses, in one line, to change a model that ships with seqvae: ``action`` (e.g.
        ``seqvae fit-prior``) is for a run of one's own, made by fine-tuning or copying it."""
        if self.pretrained:
            raise SeqvaeError(refusal(self.pretrained, self.run_dir, action))

    @property
    def codec(self) -> TextCodec:
        """Vocabulary, tokenizer and length: what ``encode_texts`` and ``ids_to_texts`` need."""
        return TextCodec(self.vocab, self.info["tokenizer"], self.max_len,
                         kekulize=self.config.data.kekule, canonical=not self.raw_output)

    @property
    def grammar(self):
        """The ``SmilesGrammar`` of this run's vocabulary, or None when it is not a SMILES run."""
        from seqvae.model.grammar import grammar_for

        return grammar_for(self.vocab.tokens, self.info["tokenizer"])


def write_run_files(run_dir: str, config: Config, vocab: Vocabulary, info: dict) -> None:
    """Writes run.json, config.json and vocab.json."""
    os.makedirs(run_dir, exist_ok=True)
    write_json_atomic(os.path.join(run_dir, "config.json"), config.to_dict())
    vocab.save(os.path.join(run_dir, "vocab.json"))
    write_json_atomic(os.path.join(run_dir, "run.json"),
                      {"format": RUN_FORMAT, "seqvae_version": __version__, **info})


def refusal(name: str, folder: str, action: str) -> str:
    """The one line that refuses ``action`` on the shipped model ``name`` (in ``folder``)."""
    return (f"{pretrained.PREFIX}{name} ships with seqvae and is read-only, {action} would change "
            f"it: fine-tune it into a run of your own (seqvae finetune {pretrained.PREFIX}{name} "
            f"DATA --out RUN) or copy it (cp -r {folder} RUN) and run {action} on the copy")


def resolve_run_dir(run_dir: str) -> tuple[str, str | None]:
    """``(directory, NAME)`` of ``pretrained:NAME`` or of a shipped model's folder given by its
    path, ``(run_dir, None)`` for any other directory."""
    run_dir = os.fspath(run_dir)
    if pretrained.is_pretrained_name(run_dir):
        folder = pretrained.resolve(run_dir)
        return folder, os.path.basename(folder)
    return run_dir, pretrained.name_of(run_dir) if os.path.isdir(run_dir) else None


def check_trainable(run_dir: str, action: str = "training") -> None:
    """Refuses to train into ``pretrained:NAME`` or a shipped model's folder (read-only)."""
    try:
        folder, name = resolve_run_dir(run_dir)
    except SeqvaeError:  # a pretrained:NAME that does not ship
        raise SeqvaeError(f"{os.fspath(run_dir)}: '{pretrained.PREFIX}' names the models that "
                          "ship with seqvae (read-only); train into a directory of your own"
                          ) from None
    if name:
        raise SeqvaeError(refusal(name, folder, action))


def read_run_files(run_dir: str) -> Run:
    """Reads the description of a run directory, or of ``pretrained:NAME`` with its files
    checked against its manifest (no TensorFlow work)."""
    run_dir, name = resolve_run_dir(run_dir)
    if name:
        pretrained.verify(run_dir)
    if not os.path.isdir(run_dir):
        raise SeqvaeError(f"{run_dir}: no such run directory")
    info_path = os.path.join(run_dir, "run.json")
    if not os.path.exists(info_path):
        raise SeqvaeError(f"{run_dir}: not a seqvae run directory (no run.json); "
                          "create one with 'seqvae train --out DIR'")
    try:
        with open(info_path) as handle:
            info = json.load(handle)
    except (ValueError, UnicodeDecodeError):
        raise SeqvaeError(f"{info_path}: corrupted (not valid JSON)") from None
    except OSError as error:
        raise SeqvaeError(f"{info_path}: cannot read ({error.strerror})") from None
    if not isinstance(info, dict) or info.get("format") != RUN_FORMAT:
        raise SeqvaeError(f"{info_path}: not a seqvae run (format {info.get('format') if isinstance(info, dict) else None!r})")
    for key in ("max_len", "vocab_size", "tokenizer"):
        if key not in info:
            raise SeqvaeError(f"{info_path}: corrupted (missing '{key}')")
    for key in ("max_len", "vocab_size"):
        if type(info[key]) is not int or info[key] < 1:
            raise SeqvaeError(f"{info_path}: corrupted ('{key}' must be a positive integer, "
                              f"got {info[key]!r})")
    from seqvae.config import load_config

    config = load_config(os.path.join(run_dir, "config.json"))
    vocab = Vocabulary.load(os.path.join(run_dir, "vocab.json"))
    if len(vocab) != info["vocab_size"]:
        raise SeqvaeError(f"{run_dir}: vocab.json has {len(vocab)} tokens but run.json says "
                          f"{info['vocab_size']}; the run directory is corrupted")
    return Run(run_dir, config, vocab, get_tokenizer(info["tokenizer"]), info, pretrained=name)


def checkpoint_dir(run_dir: str) -> str:
    return os.path.join(run_dir, "checkpoints")


def load_run(run_dir: str, checkpoint: str | None = None) -> Run:
    """Loads a run directory with the model restored from its latest checkpoint.

    Args:
        run_dir: the run directory, or ``pretrained:NAME`` (a model that ships with seqvae).
        checkpoint: a checkpoint prefix of this run (``RUN/checkpoints/ckpt-N``) to restore
            instead of the latest (a learning curve reads them all).

    Without ``checkpoint`` the newest checkpoint that restores is used: a damaged one (truncated,
    flipped bytes, missing files, NaN weights) is skipped with a one-line warning on stderr
    (``seqvae.checkpoints.restore_newest``). Training checkpoints and model-only ones (a shipped
    model's, float16 ones restored as float32: ``seqvae.checkpoints.save_model_only``) restore
    alike.
    """
    import tensorflow as tf

    from seqvae.model.vae import SequenceVAE
    from seqvae.checkpoints import float32_readable, restore_newest

    run = read_run_files(run_dir)
    properties = run.info.get("properties") or {}  # a jointly trained property head
    model = SequenceVAE(run.config.model, len(run.vocab), run.max_len,
                        num_properties=len(properties.get("names", [])),
                        grammar=run.grammar if run.config.model.grammar_features else None
                        ).build_weights()
    # Training checkpoints also hold every trainable variable under the optimizer
    # (optimizer/_trainable_variables/i); those written before the model named its GRU layers
    # as attributes hold the GRU weights only there. Restoring through both paths, the
    # assertion requires that every trainable variable was found.
    trained = tf.Module()
    trained._trainable_variables = list(model.trainable_variables)
    restorable = tf.train.Checkpoint(model=model, optimizer=trained)
    if checkpoint is not None:  # this one exactly: no fallback
        try:
            with float32_readable(checkpoint) as readable:
                status = restorable.restore(readable).expect_partial()
                status.assert_existing_objects_matched()
        except (tf.errors.OpError, AssertionError, ValueError) as error:
            raise SeqvaeError(f"{checkpoint}: cannot restore the checkpoint "
                              f"({str(error).strip().splitlines()[0][:200]})") from None
        run.checkpoint = checkpoint
    else:
        run.checkpoint = restore_newest(restorable, checkpoint_dir(run.run_dir), model,
                                        partial=True, what=run.name)
        if run.checkpoint is None:
            raise SeqvaeError(f"{run.name}: holds no checkpoint yet (training has not saved one)")
    run.model = model
    return run


FINETUNE_FILE = "finetune.json"  # where a fine-tuned run came from (seqvae.finetune)


def finetune_record(run_dir: str) -> dict | None:
    """``run_dir/finetune.json`` (BASE, data, settings and counts of a ``seqvae finetune``);
    None for a run that was not fine-tuned."""
    path = os.path.join(run_dir, FINETUNE_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def finetune_files(run_dir: str, check: bool = True) -> dict[str, str] | None:
    """The molecule files of a fine-tuned run (``seqvae finetune``): ``molecules`` (all it
    trained and validated on), ``held_out`` (the share held out: ``seqvae evaluate``'s default
    test set for it) and ``fine_tuning`` (the rest: its default training set for Novelty);
    with ``check``, None for a run that was not fine-tuned."""
    if check and not os.path.exists(os.path.join(run_dir, FINETUNE_FILE)):
        return None
    return {name: os.path.join(run_dir, "finetune", f"{name}.smi")
            for name in ("molecules", "held_out", "fine_tuning")}
