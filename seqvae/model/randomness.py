"""Stateless randomness that gives the same numbers eagerly, in ``tf.function`` and under XLA.

TensorFlow's stateless random ops (``tf.random.stateless_*``) use a different bit generator under
XLA than in the graph kernels, so the same seed gives a different loss once ``jit_compile=True``.
seqvae's noise (reparametrization, dropout, word dropout, sampling) comes from here instead: a
counter-based generator built from plain 32-bit integer arithmetic (the ``lowbias32`` integer
hash of each element's index, keyed by the seed), which every backend computes identically.

A seed is an int32 tensor of shape ``(2,)``.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

_GOLDEN = 0x9E3779B9


def _hash(x: tf.Tensor) -> tf.Tensor:
    """lowbias32 integer hash on uint32 tensors (good avalanche, two multiplies)."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))
    x = x * tf.constant(0x7FEB352D, tf.uint32)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 15))
    x = x * tf.constant(0x846CA68B, tf.uint32)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))


def _key(seed: tf.Tensor) -> tf.Tensor:
    seed = tf.bitcast(tf.cast(seed, tf.int32), tf.uint32)
    return _hash(_hash(seed[0] ^ tf.constant(_GOLDEN, tf.uint32)) ^ seed[1])


def as_seed(seed) -> tf.Tensor:
    """Turns an int, a pair or a tensor into an int32 ``(2,)`` seed."""
    if isinstance(seed, int):
        seed = [seed, 0]
    return tf.cast(tf.convert_to_tensor(seed), tf.int32)


def fold_in(seed: tf.Tensor, salt) -> tf.Tensor:
    """An independent seed ``(2,)`` derived from ``seed`` and an integer (or int tensor) salt."""
    salt = tf.bitcast(tf.cast(salt, tf.int32), tf.uint32)
    mixed = _hash(_key(seed) + salt * tf.constant(_GOLDEN, tf.uint32))
    return tf.stack([tf.bitcast(mixed, tf.int32), tf.cast(seed, tf.int32)[1]])


def _bits(count: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    key = _key(seed)
    index = tf.bitcast(tf.range(count, dtype=tf.int32), tf.uint32)
    return _hash(_hash(index ^ key) + key)


def uniform(shape, seed: tf.Tensor, dtype=tf.float32) -> tf.Tensor:
    """Uniform floats in ``[0, 1)`` with 24 random bits each."""
    shape = tf.convert_to_tensor(shape, tf.int32)
    bits = tf.bitwise.right_shift(_bits(tf.reduce_prod(shape), seed), 8)
    values = tf.cast(tf.cast(bits, tf.int32), tf.float32) * (1.0 / 16777216.0)
    return tf.cast(tf.reshape(values, shape), dtype)


def normal(shape, seed: tf.Tensor, dtype=tf.float32) -> tf.Tensor:
    """Standard normal floats (Box-Muller on two uniforms per value).

    XLA's float32 ``log`` and ``cos`` differ from the TensorFlow kernels' in the last bit for about
    a quarter of the values, so the transform runs in float64, where those differences vanish when
    the result is rounded to float32.
    """
    shape = tf.convert_to_tensor(shape, tf.int32)
    count = tf.reduce_prod(shape)
    pairs = tf.cast(tf.reshape(uniform([2 * count], seed), [2, count]), tf.float64)
    radius = tf.sqrt(-2.0 * tf.math.log(1.0 - pairs[0]))  # 1 - u is in (0, 1]
    values = tf.cast(radius * tf.cos(6.283185307179586 * pairs[1]), tf.float32)
    return tf.cast(tf.reshape(values, shape), dtype)


def dropout(x: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
    """Inverted dropout: zeroes each element with probability ``rate``, scales the rest."""
    keep = uniform(tf.shape(x), seed) >= rate
    # Multiply by a precomputed scale: Grappler and XLA rewrite a division by a constant into a
    # multiplication by its reciprocal (and eager mode does not), which changes the last bit.
    scale = tf.cast(1.0 / (1.0 - rate), x.dtype)
    return tf.where(keep, x * scale, tf.zeros_like(x))


def categorical(logits: tf.Tensor, seed: tf.Tensor, rows: tf.Tensor | None = None,
                total_rows=None) -> tf.Tensor:
    """One draw per row of ``logits (B, V)`` via the Gumbel-max trick -> int32 ``(B,)``.

    With ``rows`` (the rows' indices in a batch of ``total_rows``), each row gets the noise it
    would get in the full batch, so a compacted batch draws the same samples.
    """
    if rows is None:
        noise = uniform(tf.shape(logits), seed)
    else:
        noise = tf.gather(uniform(tf.stack([total_rows, tf.shape(logits)[1]]), seed), rows)
    gumbel = -tf.math.log(-tf.math.log(noise * (1.0 - 2e-7) + 1e-7))
    return tf.argmax(tf.cast(logits, tf.float32) + gumbel, axis=-1, output_type=tf.int32)


def reparametrize(mean, log_var, eps):
    """``mean + exp(log_var / 2) * eps``: draws of N(mean, diag(exp(log_var))) from standard-normal
    ``eps`` of the same shape (broadcast); in TensorFlow when any input is a tensor, else numpy.
    The one place a posterior is sampled: the VAE's forward pass, the IW bound, reconstruction."""
    if any(tf.is_tensor(x) for x in (mean, log_var, eps)):
        return mean + tf.exp(0.5 * log_var) * eps
    return mean + np.exp(0.5 * log_var) * eps
