"""Checkpoints that survive faults: verified restores that fall back, and saves that fail cleanly.

``tf.train.CheckpointManager`` writes a checkpoint's files under a temporary name and updates its
``checkpoint`` index only afterwards, so a crash or a full disk never makes a half-written
checkpoint the latest one it names. What it does not do is notice that a checkpoint was damaged
later (a copy that died halfway, flipped bytes, a deleted index or ``.index`` file), or that the
weights it holds are NaN. ``restore_newest`` tries the checkpoints newest first, verifies each
(every variable found, shapes that fit, finite weights) and falls back to the newest one that
restores, with a one-line warning naming each damaged one. ``save`` refuses non-finite weights
and turns a failed write (``ENOSPC``, ``EFBIG``, read-only files) into one line that names the
checkpoint left intact. ``save_model_only`` writes the weights alone, optionally as float16, for a
model that ships with seqvae; every restore here reads those as float32.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import logging
import os
import re
import shutil
import tempfile
import uuid

import tensorflow as tf

from seqvae.errors import SeqvaeError
from seqvae.messages import warn

_NUMBERED = re.compile(r"-(\d+)$")


def checkpoint_step(prefix: str) -> int:
    """The number of ``.../ckpt-N`` (the training step it was saved at); -1 when it has none."""
    found = _NUMBERED.search(prefix)
    return int(found.group(1)) if found else -1


def candidates(directory: str) -> list[str]:
    """Checkpoint prefixes in ``directory``, newest first: the ones the ``checkpoint`` index names
    and any ``ckpt-N.index`` on disk (so a deleted or damaged index loses nothing)."""
    prefixes = set()
    try:
        state = tf.train.get_checkpoint_state(directory)
    except Exception:  # a damaged index file: fall back to the files on disk
        state = None
    if state is not None:
        for path in list(state.all_model_checkpoint_paths) + [state.model_checkpoint_path]:
            if path:
                prefixes.add(os.path.normpath(path))  # TensorFlow joined it to directory
    for path in glob.glob(os.path.join(glob.escape(directory), "*.index")):
        prefixes.add(os.path.normpath(path[:-len(".index")]))
    for path in glob.glob(os.path.join(glob.escape(directory), "*.data-*-of-*")):
        prefixes.add(os.path.normpath(path[:path.rindex(".data-")]))  # its .index may be lost
    return sorted(prefixes, key=lambda p: (checkpoint_step(p), p), reverse=True)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:200]


def _shape_mismatch(prefix: str, trainable: list) -> str | None:
    """Why the checkpoint's weights do not fit ``trainable`` (the model the run's config.json and
    vocab.json describe), or None. Training checkpoints store each trainable variable once, as
    ``optimizer/_trainable_variables/i`` in the model's order; comparing shapes before restoring
    keeps a mismatch from leaving TensorFlow's deferred restorations (and their warnings) behind.
    Raises when the checkpoint cannot be read at all."""
    shapes = dict(tf.train.list_variables(prefix))
    key = "optimizer/_trainable_variables/{}/.ATTRIBUTES/VARIABLE_VALUE"
    stored = [shapes.get(key.format(i)) for i in range(len(trainable))]
    if any(shape is None for shape in stored):
        return None  # an older layout: the restore itself checks it
    extra = shapes.get(key.format(len(trainable)))
    for variable, shape in zip(trainable, stored):
        if list(shape) != list(variable.shape):
            return (f"{variable.path if hasattr(variable, 'path') else variable.name} has shape "
                    f"{list(shape)} in the checkpoint, {list(variable.shape)} in the model")
    if extra is not None:
        return f"the checkpoint holds more weights than the model's {len(trainable)}"
    return None


@contextlib.contextmanager
def _quiet_tensorflow_warnings():
    """A failed restore logs one ``Value in checkpoint could not be found`` warning per unmatched
    value when its status object is collected (~35 lines for a tiny model): the failure is
    reported in one line instead, so those are silenced (and collected) here."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        gc.collect()
        logger.setLevel(level)


def _try_restore(checkpoint: tf.train.Checkpoint, prefix: str, weights: list,
                 partial: bool) -> str | None:
    """Restores ``prefix`` into ``checkpoint``; None when it restored, else why not (one line)."""
    try:
        with float32_readable(prefix) as readable:
            status = checkpoint.restore(readable)
            if partial:
                status.expect_partial()
            status.assert_existing_objects_matched()
    except Exception as error:  # noqa: BLE001 -- any failure (the reader raises IndexError too)
        return _first_line(error)
    if not weights_are_finite(weights):
        return "holds NaN or infinite weights"
    return None


def restore_newest(checkpoint: tf.train.Checkpoint, directory: str, model, *,
                   partial: bool = False, what: str | None = None) -> str | None:
    """Restores the newest checkpoint of ``directory`` that restores and holds finite weights.

    Args:
      checkpoint: the objects to restore into.
      directory: the checkpoint directory (``RUN/checkpoints``).
      model: the Keras model inside ``checkpoint``: its trainable variables must fit the stored
        shapes and its weights must come out finite.
      partial: the checkpoint may hold more than ``checkpoint`` asks for (loading for inference).
      what: the run directory, named in the messages.

    Returns:
      The prefix restored, or None when the directory holds no checkpoint at all.

    Raises:
      SeqvaeError: checkpoints exist but none restores, or the run's config.json / vocab.json
        disagree with the weights (the shapes do not fit; no older checkpoint would fit either).
    """
    found = candidates(directory)
    if not found:
        return None
    failures = []
    with _quiet_tensorflow_warnings():
        for prefix in found:
            try:
                mismatch = _shape_mismatch(prefix, model.trainable_variables)
            except Exception as error:  # noqa: BLE001 -- an unreadable checkpoint is damaged
                reason = _first_line(error)
            else:
                if mismatch:
                    raise SeqvaeError(f"{what or directory}: config.json or vocab.json disagrees "
                                      f"with the weights in {prefix} ({mismatch}); restore the "
                                      "run's own config.json and vocab.json")
                reason = _try_restore(checkpoint, prefix, model.weights, partial)
            if reason is None:
                return prefix
            failures.append(prefix)
            rest = "no older checkpoint left" if prefix == found[-1] else "trying an older one"
            warn(f"seqvae: warning: checkpoint {prefix} is damaged ({reason}); {rest}")
    raise SeqvaeError(f"{what or directory}: no checkpoint restores ({len(failures)} damaged: "
                      f"{', '.join(os.path.basename(p) for p in failures)}); "
                      "the weights are lost, train again into a new --out")


def weights_are_finite(weights: list) -> bool:
    """True when every floating-point variable in ``weights`` holds only finite values."""
    values = [tf.convert_to_tensor(w) for w in weights]
    return all(bool(tf.reduce_all(tf.math.is_finite(v))) for v in values if v.dtype.is_floating)


def save(manager: tf.train.CheckpointManager, step: int, weights: list) -> str:
    """Saves checkpoint ``step`` unless the weights are non-finite; a failed write is one line.

    The manager writes the checkpoint's files first and the ``checkpoint`` index last, so when a
    write fails halfway (full disk, file-size limit, read-only directory) the latest checkpoint
    the index names is still the previous one, intact. The half-written files are removed.
    """
    if not weights_are_finite(weights):  # never reached by the loop, which skips such steps
        raise SeqvaeError(f"refusing to save checkpoint {step}: the weights hold NaN or infinite "
                          f"values; the latest checkpoint {manager.latest_checkpoint} is intact")
    try:
        return manager.save(checkpoint_number=step)
    except (tf.errors.OpError, OSError) as error:
        _remove_partial(manager.directory, step)
        raise SeqvaeError(
            f"cannot write checkpoint {os.path.join(manager.directory, f'ckpt-{step}')} "
            f"({_first_line(error)}); the latest checkpoint "
            f"{manager.latest_checkpoint or '(none yet)'} is intact; free space or fix the "
            "directory and run the same command with --resume") from None


def remove_orphans(directory: str) -> list[str]:
    """Deletes what saves cut off by a kill left in ``directory``: TensorFlow's ``ckpt-N_temp``
    folders, ``*.tempstate*`` files and ``checkpoint.tmp*`` index drafts (each as large as a
    checkpoint: repeated preemptions would fill the disk). TensorFlow documents them as safe to
    remove after a failure; call it only while holding the run's lock (no save in progress).

    Returns:
      The paths removed.
    """
    removed = []
    for path in glob.glob(os.path.join(glob.escape(directory), "*")):
        name = os.path.basename(path)
        if (name.endswith("_temp") and os.path.isdir(path)) or ".tempstate" in name or (
                name.startswith("checkpoint.tmp")):
            with contextlib.suppress(OSError):
                if os.path.isdir(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
                removed.append(path)
    return removed


def _remove_partial(directory: str, step: int) -> None:
    """Deletes what a failed save of checkpoint ``step`` left (temporary and partial files)."""
    for path in glob.glob(os.path.join(glob.escape(directory), f"ckpt-{step}[._]*")):
        with contextlib.suppress(OSError):
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.remove(path)


# --- model-only checkpoints (a model that ships with seqvae) -------------------------------------


def cast_checkpoint(source: str, target: str, from_dtype: tf.DType, to_dtype: tf.DType) -> None:
    """Writes the checkpoint ``source`` to the prefix ``target`` with every ``from_dtype``
    tensor cast to ``to_dtype`` and everything else (the object graph, counters) as it is, so
    it restores as ``source`` does (into variables of the new dtype)."""
    reader = tf.train.load_checkpoint(source)
    dtypes = reader.get_variable_to_dtype_map()
    names = sorted(dtypes)
    tensors = [tf.cast(reader.get_tensor(name), to_dtype) if dtypes[name] == from_dtype
               else tf.constant(reader.get_tensor(name), dtype=dtypes[name]) for name in names]
    tf.raw_ops.SaveV2(prefix=target, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=tensors)


@contextlib.contextmanager
def float32_readable(prefix: str):
    """Yields ``prefix``, or for a checkpoint that holds float16 weights (a model shipped at half
    the size: ``save_model_only``) a float32 copy of it in memory (TensorFlow's ``ram://`` file
    system), removed afterwards: a checkpoint restores only into variables of its own dtype."""
    try:
        dtypes = tf.train.load_checkpoint(prefix).get_variable_to_dtype_map()
    except Exception:  # noqa: BLE001 -- unreadable: the restore itself says why
        dtypes = {}
    if tf.float16 not in dtypes.values():
        yield prefix
        return
    folder = f"ram://seqvae-float32/{uuid.uuid4().hex}"
    cast_checkpoint(prefix, f"{folder}/ckpt", tf.float16, tf.float32)
    try:
        yield f"{folder}/ckpt"
    finally:
        with contextlib.suppress(tf.errors.OpError):
            tf.io.gfile.rmtree(folder)


def save_model_only(model, directory: str, step: int, float16: bool = False) -> str:
    """Writes ``directory/ckpt-STEP``, the model's weights alone (``tf.train.Checkpoint(model=
    model)``: no optimizer state, a third of a training checkpoint with Adam's two moments), and
    the ``checkpoint`` index naming it; with ``float16`` every float32 weight is stored as
    float16 (half again; ``load_run`` restores it as float32). Returns the prefix.

    The index holds no timestamps, so the same weights give the same bytes (a manifest's sums
    stay the same).
    """
    os.makedirs(directory, exist_ok=True)
    prefix = os.path.join(directory, f"ckpt-{step}")
    with tempfile.TemporaryDirectory(prefix="seqvae-model-only-") as scratch:
        written = tf.train.Checkpoint(model=model).save(os.path.join(scratch, "ckpt"))
        cast_checkpoint(written, prefix, tf.float32, tf.float16 if float16 else tf.float32)
    with open(os.path.join(directory, "checkpoint"), "w", encoding="utf-8") as index:
        index.write(f'model_checkpoint_path: "ckpt-{step}"\n'
                    f'all_model_checkpoint_paths: "ckpt-{step}"\n')
    return prefix
