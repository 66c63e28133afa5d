"""The VAE's likelihood terms as small pure functions: token and sequence cross-entropy, the
grammar-constrained softmax, and the KL divergence of a diagonal Gaussian posterior from N(0, I).

Conventions: ``targets`` are token ids ``(B, T)`` with ``<pad>`` = 0 after the ``<eos>``;
``logits`` are ``(B, T, V)``. All reductions are stated exactly in each docstring.
"""

from __future__ import annotations

import tensorflow as tf

from seqvae.data.vocabulary import PAD_ID


def token_cross_entropy(targets: tf.Tensor, logits: tf.Tensor, pad_id: int = PAD_ID) -> tf.Tensor:
    """Mean cross-entropy per real token.

    ``sum over (b, t) with targets[b, t] != pad of -log softmax(logits[b, t])[targets[b, t]]``
    divided by the number of such positions. Padding positions contribute nothing (not even to
    the gradient). The ``<eos>`` token is a real position: the model must learn to stop.

    Args:
      targets: int ``(B, T)`` token ids.
      logits: float ``(B, T, V)`` unnormalised scores.
      pad_id: id of the padding token.

    Returns:
      Scalar float32.
    """
    logits = tf.cast(logits, tf.float32)
    mask = tf.cast(tf.not_equal(targets, pad_id), tf.float32)
    per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
    return tf.reduce_sum(per_token * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)


def sequence_cross_entropy(targets: tf.Tensor, logits: tf.Tensor, pad_id: int = PAD_ID) -> tf.Tensor:
    """Per-sequence negative log-likelihood ``-log p(x | z)``: the sum over the real tokens.

    Args:
      targets: int ``(B, T)``.
      logits: float ``(B, T, V)``.
      pad_id: id of the padding token.

    Returns:
      float32 ``(B,)``.
    """
    logits = tf.cast(logits, tf.float32)
    mask = tf.cast(tf.not_equal(targets, pad_id), tf.float32)
    per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
    return tf.reduce_sum(per_token * mask, axis=1)


def constrained_logits(logits: tf.Tensor, allowed: tf.Tensor) -> tf.Tensor:
    """A constrained softmax: disallowed tokens get -1e9, so the softmax is over ``allowed``.

    Args:
      logits: float ``(B, T, V)``.
      allowed: bool ``(B, T, V)``, at least one True per position.

    Returns:
      float32 ``(B, T, V)``.
    """
    return tf.where(allowed, tf.cast(logits, tf.float32), -1e9)


def probability_cross_entropy(targets: tf.Tensor, probabilities: tf.Tensor) -> tf.Tensor:
    """Categorical cross-entropy of one-hot (or soft) targets against probabilities.

    ``mean over (b, t) of -sum_c targets[b, t, c] * log(probabilities[b, t, c])``: the classic
    example's ``CategoricalCrossentropy`` on ``(B, T, C)`` tensors, with probabilities clipped to
    ``[1e-7, 1]`` as Keras does.
    """
    probabilities = tf.clip_by_value(tf.cast(probabilities, tf.float32), 1e-7, 1.0)
    return tf.reduce_mean(-tf.reduce_sum(tf.cast(targets, tf.float32) * tf.math.log(probabilities), -1))


def kl_per_dimension(z_mean: tf.Tensor, z_log_var: tf.Tensor) -> tf.Tensor:
    """``KL(q(z|x) || N(0, I))`` for each latent dimension, averaged over the batch.

    Per example and dimension: ``0.5 * (mean^2 + exp(log_var) - 1 - log_var)``.

    Args:
      z_mean, z_log_var: float ``(B, L)``.

    Returns:
      float32 ``(L,)``, nats.
    """
    z_mean = tf.cast(z_mean, tf.float32)
    z_log_var = tf.cast(z_log_var, tf.float32)
    per_dim = 0.5 * (tf.square(z_mean) + tf.exp(z_log_var) - 1.0 - z_log_var)
    return tf.reduce_mean(per_dim, axis=0)


def kl_divergence(z_mean: tf.Tensor, z_log_var: tf.Tensor, free_bits: float = 0.0) -> tf.Tensor:
    """KL summed over latent dimensions and averaged over the batch, with optional free bits.

    Free bits (Kingma et al. 2016, per dimension): each dimension's batch-mean KL is replaced by
    ``max(KL_d, free_bits)``, so dimensions under the threshold get no push towards the prior.

    Args:
      z_mean, z_log_var: float ``(B, L)``.
      free_bits: nats per dimension that are not penalised; 0 disables.

    Returns:
      Scalar float32, nats per sequence.
    """
    per_dim = kl_per_dimension(z_mean, z_log_var)
    if free_bits > 0:
        per_dim = tf.maximum(per_dim, free_bits)
    return tf.reduce_sum(per_dim)
