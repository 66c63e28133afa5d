"""Learning-rate and KL-weight schedules: pure functions of the optimizer step (Python numbers or
tensors), and the learning rate as a Keras schedule of the optimizer's step counter."""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from seqvae.config import TrainConfig


def kl_weight(step, config: TrainConfig, total_steps=0):
    """KL weight at an optimizer step (works on Python numbers and on tensors).

    - ``constant``: ``kl_weight_end`` at every step.
    - ``linear`` (MOSES): ``start`` until ``kl_start_step``, then a straight line to ``end`` over
      ``kl_anneal_steps`` steps, then ``end``.
    - ``sigmoid`` (chemical VAE): ``start + (end - start) * sigmoid(10 * (p - 0.5))`` with
      ``p = (step - kl_start_step) / kl_anneal_steps``, then ``end``.
    - ``cyclical`` (Fu et al. 2019): the run (``total_steps``, else ``kl_anneal_steps *
      kl_cycles``) is cut into ``kl_cycles`` cycles; in each, the weight rises linearly from
      ``start`` to ``end`` over the first half and stays at ``end`` for the second half.

    ``kl_anneal_fraction > 0`` replaces ``kl_anneal_steps`` by that fraction of ``total_steps``
    (the planned run, an int or a tensor that a time-bounded run re-plans), so a run of any
    length ends annealed.
    """
    start, end = config.kl_weight_start, config.kl_weight_end
    step = tf.cast(step, tf.float32)
    total = tf.cast(total_steps, tf.float32)
    if config.kl_schedule == "constant":
        return tf.constant(end, tf.float32)
    anneal = tf.constant(float(config.kl_anneal_steps))
    if config.kl_anneal_fraction > 0:
        anneal = tf.where(total > 0, config.kl_anneal_fraction * total, anneal)
    if config.kl_schedule == "cyclical":
        run = tf.where(total > 0, total, anneal * config.kl_cycles)
        period = tf.maximum(run / config.kl_cycles, 1.0)
        phase = tf.math.floormod(step, period) / period
        return start + (end - start) * tf.minimum(phase * 2.0, 1.0)
    progress = tf.clip_by_value((step - config.kl_start_step) / tf.maximum(anneal, 1.0), 0.0, 1.0)
    if config.kl_schedule == "linear":
        return start + (end - start) * progress
    sig = tf.sigmoid(10.0 * (progress - 0.5))
    return tf.where(progress >= 1.0, end, start + (end - start) * sig)


def own_sample_rate(step, config: TrainConfig, total_steps=0):
    """Scheduled sampling's rate at an optimizer step: the probability that a decoder input is
    the model's own draw instead of the true token (``train.scheduled_sampling``).

    It rises on a straight line from 0 at step 0 to ``scheduled_sampling`` at ``total_steps``
    (the planned run, an int or a tensor that a time-bounded run re-plans), so training starts
    fully teacher-forced and ends nearest free running (Bengio et al. 2015 decay the
    teacher-forcing probability the same way); ``scheduled_sampling`` throughout if the run's
    length is unknown.
    """
    step = tf.cast(step, tf.float32)
    total = tf.cast(total_steps, tf.float32)
    progress = tf.where(total > 0, tf.clip_by_value(step / tf.maximum(total, 1.0), 0.0, 1.0), 1.0)
    return config.scheduled_sampling * progress


def learning_rate(step, config: TrainConfig, total_steps=0):
    """Learning rate at an optimizer step: linear warm-up, then the configured decay.

    - ``constant``: ``learning_rate``.
    - ``cosine``: from ``learning_rate`` down to ``lr_min`` along a half cosine over
      ``total_steps`` (the run's planned length; constant if unknown).
    - ``exponential``: ``learning_rate * lr_decay_rate ** (step / lr_decay_steps)``, floored at
      ``lr_min``.
    """
    step = tf.cast(step, tf.float32)
    peak = config.learning_rate
    if config.lr_schedule == "cosine":
        total = tf.cast(total_steps, tf.float32)
        progress = tf.clip_by_value(step / tf.maximum(total, 1.0), 0.0, 1.0)
        cosine = config.lr_min + 0.5 * (peak - config.lr_min) * (1.0 + tf.cos(math.pi * progress))
        rate = tf.where(total > 0, cosine, peak)
    elif config.lr_schedule == "exponential":
        rate = tf.maximum(peak * tf.pow(config.lr_decay_rate, step / config.lr_decay_steps), config.lr_min)
    else:
        rate = tf.constant(peak, tf.float32)
    if config.warmup_steps > 0:
        rate = rate * tf.minimum(1.0, (step + 1.0) / config.warmup_steps)
    return rate


class LearningRateSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The pure ``learning_rate`` as a Keras schedule of the optimizer's step counter."""

    def __init__(self, config: TrainConfig, total_steps):
        self.config, self.total_steps = config, total_steps

    def __call__(self, step):
        return learning_rate(step, self.config, self.total_steps)

    def get_config(self):
        return {}
