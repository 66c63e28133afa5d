"""KL-weight and learning-rate schedules: hand-checked values, Python numbers and tensors alike."""

import math

import pytest
import tensorflow as tf

from seqvae.config import TrainConfig
from seqvae.training import schedules


KL = dict(kl_weight_start=0.1, kl_weight_end=0.5, kl_start_step=10, kl_anneal_steps=100)


@pytest.mark.parametrize("schedule, step, expected", [
    ("constant", 0, 0.5), ("constant", 10_000, 0.5),
    ("linear", 0, 0.1), ("linear", 10, 0.1), ("linear", 35, 0.2), ("linear", 60, 0.3),
    ("linear", 110, 0.5), ("linear", 5000, 0.5),
    ("sigmoid", 0, 0.1 + 0.4 / (1 + math.exp(5))), ("sigmoid", 10, 0.1 + 0.4 / (1 + math.exp(5))),
    ("sigmoid", 60, 0.3), ("sigmoid", 80, 0.1 + 0.4 / (1 + math.exp(-2))),
    ("sigmoid", 110, 0.5), ("sigmoid", 5000, 0.5),
])
def test_kl_weight_schedules(schedule, step, expected):
    config = TrainConfig(kl_schedule=schedule, **KL)
    assert float(schedules.kl_weight(step, config)) == pytest.approx(expected, rel=1e-5)
    as_tensor = schedules.kl_weight(tf.constant(step, tf.int64), config)
    assert float(as_tensor) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("step, expected", [
    (0, 0.1), (25, 0.3), (50, 0.5), (99, 0.5), (100, 0.1), (125, 0.3), (150, 0.5), (399, 0.5),
])
def test_kl_weight_cyclical(step, expected):
    config = TrainConfig(kl_schedule="cyclical", kl_cycles=4, **KL)
    # 4 cycles over a 400-step run: period 100, rising over the first 50 steps of each.
    assert float(schedules.kl_weight(step, config, total_steps=400)) == pytest.approx(expected, rel=1e-5)
    # Without a run length the period is kl_anneal_steps (100) as well.
    assert float(schedules.kl_weight(step, config)) == pytest.approx(expected, rel=1e-5)


def test_kl_weight_inside_tf_function():
    config = TrainConfig(kl_schedule="linear", **KL)
    compiled = tf.function(lambda step: schedules.kl_weight(step, config), jit_compile=True)
    assert float(compiled(tf.constant(60, tf.int64))) == pytest.approx(0.3, rel=1e-5)


LR = dict(learning_rate=1e-3, lr_min=1e-4, lr_decay_steps=10, lr_decay_rate=0.5)


@pytest.mark.parametrize("schedule, step, total, expected", [
    ("constant", 0, 100, 1e-3), ("constant", 99, 100, 1e-3),
    ("cosine", 0, 100, 1e-3), ("cosine", 50, 100, 5.5e-4), ("cosine", 100, 100, 1e-4),
    ("cosine", 500, 100, 1e-4), ("cosine", 50, 0, 1e-3),  # unknown run length: constant
    ("exponential", 0, 0, 1e-3), ("exponential", 10, 0, 5e-4), ("exponential", 20, 0, 2.5e-4),
    ("exponential", 5, 0, 1e-3 * 0.5 ** 0.5), ("exponential", 1000, 0, 1e-4),  # floored at lr_min
])
def test_learning_rate_schedules(schedule, step, total, expected):
    config = TrainConfig(lr_schedule=schedule, **LR)
    assert float(schedules.learning_rate(step, config, total)) == pytest.approx(expected, rel=1e-5)
    assert float(schedules.learning_rate(tf.constant(step, tf.int64), config, total)) == pytest.approx(
        expected, rel=1e-5)


@pytest.mark.parametrize("step, factor", [(0, 0.1), (4, 0.5), (9, 1.0), (10, 1.0), (1000, 1.0)])
def test_learning_rate_warmup(step, factor):
    config = TrainConfig(lr_schedule="constant", warmup_steps=10, **LR)
    assert float(schedules.learning_rate(step, config, 100)) == pytest.approx(1e-3 * factor, rel=1e-5)


def test_kl_anneal_over_a_fraction_of_a_replanned_run():
    """A time-bounded run re-plans its length; fraction-based annealing follows the new plan."""
    config = TrainConfig(kl_schedule="linear", kl_weight_start=0.0, kl_weight_end=1.0,
                         kl_anneal_fraction=0.5, kl_anneal_steps=10_000)
    planned = tf.Variable(100, dtype=tf.int64)
    compiled = tf.function(lambda step: schedules.kl_weight(step, config, planned))
    assert float(compiled(25)) == pytest.approx(0.5)
    assert float(compiled(50)) == pytest.approx(1.0)
    planned.assign(200)  # no retrace needed: the plan is a variable
    assert float(compiled(50)) == pytest.approx(0.5)
    assert float(compiled(100)) == pytest.approx(1.0)


def test_cosine_ends_decayed_at_the_planned_length():
    config = TrainConfig(lr_schedule="cosine", learning_rate=1e-3, lr_min=1e-4)
    planned = tf.Variable(100, dtype=tf.int64)
    assert float(schedules.learning_rate(100, config, planned)) == pytest.approx(1e-4)
    planned.assign(400)
    assert float(schedules.learning_rate(200, config, planned)) == pytest.approx(5.5e-4)
    assert float(schedules.learning_rate(400, config, planned)) == pytest.approx(1e-4)
    assert float(schedules.learning_rate(7, config, 0)) == pytest.approx(1e-3)  # length unknown


@pytest.mark.parametrize("step, total, expected", [(0, 100, 0.0), (50, 100, 0.2), (100, 100, 0.4),
                                                   (300, 100, 0.4), (7, 0, 0.4)])
def test_own_sample_rate_rises_over_the_run(step, total, expected):
    config = TrainConfig(scheduled_sampling=0.4)
    assert float(schedules.own_sample_rate(step, config, total)) == pytest.approx(expected)
    planned = tf.Variable(total, dtype=tf.int64)  # a re-planned run: a tensor
    assert float(tf.function(schedules.own_sample_rate)(step, config, planned)) == pytest.approx(
        expected)
