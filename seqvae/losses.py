"""Loss terms and schedules as small pure functions; the training loop composes them.

Conventions: ``targets`` are token ids ``(B, T)`` with ``<pad>`` = 0 after the ``<eos>``;
``logits`` are ``(B, T, V)``. All reductions are stated exactly in each docstring.
"""

from __future__ import annotations

import math

import tensorflow as tf

from seqvae import randomness
from seqvae.config import TrainConfig


def token_cross_entropy(targets: tf.Tensor, logits: tf.Tensor, pad_id: int = 0) -> tf.Tensor:
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


def sequence_cross_entropy(targets: tf.Tensor, logits: tf.Tensor, pad_id: int = 0) -> tf.Tensor:
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


def kl_weight(step, config: TrainConfig, total_steps: int = 0):
    """KL weight at an optimizer step (works on Python numbers and on tensors).

    - ``constant``: ``kl_weight_end`` at every step.
    - ``linear`` (MOSES): ``start`` until ``kl_start_step``, then a straight line to ``end`` over
      ``kl_anneal_steps`` steps, then ``end``.
    - ``sigmoid`` (chemical VAE): ``start + (end - start) * sigmoid(10 * (p - 0.5))`` with
      ``p = (step - kl_start_step) / kl_anneal_steps``, then ``end``.
    - ``cyclical`` (Fu et al. 2019): the run (``total_steps``, else ``kl_anneal_steps *
      kl_cycles``) is cut into ``kl_cycles`` cycles; in each, the weight rises linearly from
      ``start`` to ``end`` over the first half and stays at ``end`` for the second half.
    """
    start, end = config.kl_weight_start, config.kl_weight_end
    step = tf.cast(step, tf.float32)
    if config.kl_schedule == "constant":
        return tf.constant(end, tf.float32)
    if config.kl_schedule == "cyclical":
        period = max((total_steps or config.kl_anneal_steps * config.kl_cycles) / config.kl_cycles, 1.0)
        phase = tf.math.floormod(step, period) / period
        return start + (end - start) * tf.minimum(phase * 2.0, 1.0)
    progress = tf.clip_by_value((step - config.kl_start_step) / max(config.kl_anneal_steps, 1), 0.0, 1.0)
    if config.kl_schedule == "linear":
        return start + (end - start) * progress
    sig = tf.sigmoid(10.0 * (progress - 0.5))
    return tf.where(progress >= 1.0, end, start + (end - start) * sig)


def learning_rate(step, config: TrainConfig, total_steps: int = 0):
    """Learning rate at an optimizer step: linear warm-up, then the configured decay.

    - ``constant``: ``learning_rate``.
    - ``cosine``: from ``learning_rate`` down to ``lr_min`` along a half cosine over
      ``total_steps`` (the run's planned length; constant if unknown).
    - ``exponential``: ``learning_rate * lr_decay_rate ** (step / lr_decay_steps)``, floored at
      ``lr_min``.
    """
    step = tf.cast(step, tf.float32)
    peak = config.learning_rate
    if config.lr_schedule == "cosine" and total_steps > 0:
        progress = tf.clip_by_value(step / float(total_steps), 0.0, 1.0)
        rate = config.lr_min + 0.5 * (peak - config.lr_min) * (1.0 + tf.cos(math.pi * progress))
    elif config.lr_schedule == "exponential":
        rate = tf.maximum(peak * tf.pow(config.lr_decay_rate, step / config.lr_decay_steps), config.lr_min)
    else:
        rate = tf.constant(peak, tf.float32)
    if config.warmup_steps > 0:
        rate = rate * tf.minimum(1.0, (step + 1.0) / config.warmup_steps)
    return rate


def word_dropout(inputs: tf.Tensor, rate: float, seed: tf.Tensor, unk_id: int = 3,
                 keep_ids: tuple[int, ...] = (0, 1)) -> tf.Tensor:
    """Replaces decoder input tokens by ``<unk>`` with probability ``rate`` (Bowman et al. 2016).

    Padding and ``<bos>`` are never replaced. Stateless: the same ``seed`` gives the same mask.

    Args:
      inputs: int ``(B, T)`` decoder input ids.
      rate: replacement probability.
      seed: int ``(2,)`` stateless seed.

    Returns:
      int ``(B, T)``.
    """
    if rate <= 0:
        return inputs
    drop = randomness.uniform(tf.shape(inputs), seed) < rate
    for keep in keep_ids:
        drop = drop & tf.not_equal(inputs, keep)
    return tf.where(drop, tf.cast(unk_id, inputs.dtype), inputs)
