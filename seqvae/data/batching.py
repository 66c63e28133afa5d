"""Splitting and batching encoded sequences: the validation split, the length-bucketed batch plan
of an epoch (a pure function of seed and epoch), padding, and the ``tf.data`` pipeline."""

from __future__ import annotations

from typing import Iterator

import numpy as np
import tensorflow as tf


def validation_split(count: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of ``range(count)`` into (train, validation) index arrays, each sorted."""
    order = np.random.default_rng([seed, 7919]).permutation(count)
    held_out = int(round(count * fraction)) if count > 1 else 0
    return np.sort(order[held_out:]), np.sort(order[:held_out])


def batch_plan(lengths: np.ndarray, batch_size: int, seed: int, epoch: int, bucket: bool = True,
               pool_batches: int = 64) -> list[np.ndarray]:
    """The batches of one epoch, as arrays of row indices; a pure function of (seed, epoch).

    Rows are shuffled; with ``bucket`` each pool of ``pool_batches * batch_size`` shuffled rows is
    sorted by length and cut into batches, so a batch holds sequences of similar length and little
    padding; the batches are then shuffled. Every row appears exactly once.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    if bucket:
        pool = batch_size * pool_batches
        order = np.concatenate([chunk[np.argsort(lengths[chunk], kind="stable")]
                                for chunk in np.array_split(order, max(1, -(-len(order) // pool)))])
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    if bucket:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def padded_length(batch_lengths: np.ndarray, bucket_width: int, max_len: int) -> int:
    """Time steps of a batch: its longest sequence rounded up to a multiple of ``bucket_width``."""
    longest = int(batch_lengths.max())
    return min(max_len, -(-longest // bucket_width) * bucket_width)


def padding_fraction(lengths: np.ndarray, batches: list[np.ndarray], bucket_width: int,
                     max_len: int) -> float:
    """Fraction of computed positions that are padding: ``1 - real tokens / (sum of B_i * T_i)``."""
    total = sum(len(b) * padded_length(lengths[b], bucket_width, max_len) for b in batches)
    return 1.0 - float(lengths.sum()) / max(total, 1)


def make_dataset(ids: np.ndarray, lengths: np.ndarray, batches: list[np.ndarray],
                 bucket_width: int = 8, targets: np.ndarray | None = None) -> tf.data.Dataset:
    """A prefetched ``tf.data`` pipeline of int32 batches ``(B_i, T_i)`` in the plan's order.

    ``T_i`` is ``padded_length`` of the batch, so XLA sees few distinct shapes. With
    ``targets`` float32 ``(N, P)`` (property heads) each element is ``(ids, targets (B_i, P))``.
    """
    max_len = ids.shape[1]

    def generate() -> Iterator[np.ndarray]:
        for batch in batches:
            rows = ids[batch, :padded_length(lengths[batch], bucket_width, max_len)]
            yield rows if targets is None else (rows, targets[batch])

    signature = tf.TensorSpec([None, None], tf.int32)
    if targets is not None:
        signature = (signature, tf.TensorSpec([None, targets.shape[1]], tf.float32))
    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature)
    return dataset.prefetch(tf.data.AUTOTUNE)
