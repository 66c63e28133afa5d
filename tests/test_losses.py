"""Tests for seqvae.losses: hand-computed loss values and every schedule at chosen steps."""

import math

import numpy as np
import pytest
import tensorflow as tf

from seqvae import losses
from seqvae.config import TrainConfig

# Two sequences over a vocabulary of 4, length 3; id 0 is <pad>.
TARGETS = np.array([[1, 2, 0], [3, 0, 0]], np.int32)
LOGITS = np.array([
    [[0.5, 1.0, -1.0, 0.0], [2.0, 0.0, 1.0, -0.5], [9.0, -9.0, 3.0, 1.0]],
    [[0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0], [-3.0, 0.0, 0.0, 5.0]],
], np.float32)


def _neg_log_softmax(logits, target):
    logits = np.asarray(logits, np.float64)
    return math.log(np.exp(logits).sum()) - logits[target]


def test_token_cross_entropy_by_hand():
    real = [_neg_log_softmax(LOGITS[0, 0], 1), _neg_log_softmax(LOGITS[0, 1], 2),
            _neg_log_softmax(LOGITS[1, 0], 3)]
    # Row 1, position 0: uniform logits over 4 tokens -> log 4.
    assert real[2] == pytest.approx(math.log(4))
    value = losses.token_cross_entropy(TARGETS, LOGITS)
    assert value.dtype == tf.float32 and value.shape == ()
    assert float(value) == pytest.approx(sum(real) / 3, rel=1e-6)


def test_padding_is_masked_in_value_and_gradient():
    changed = LOGITS.copy()
    changed[0, 2] = [-50.0, 50.0, 0.0, 0.0]  # padding positions: any scores
    changed[1, 1:] = 123.0
    assert float(losses.token_cross_entropy(TARGETS, changed)) == pytest.approx(
        float(losses.token_cross_entropy(TARGETS, LOGITS)), rel=1e-6)
    logits = tf.Variable(LOGITS)
    with tf.GradientTape() as tape:
        loss = losses.token_cross_entropy(TARGETS, logits)
    grad = tape.gradient(loss, logits).numpy()
    mask = TARGETS != 0
    assert np.all(grad[~mask] == 0.0)
    assert np.all(np.abs(grad[mask]).sum(-1) > 0)


def test_token_cross_entropy_all_padding_is_zero_not_nan():
    assert float(losses.token_cross_entropy(np.zeros((2, 3), np.int32), LOGITS)) == 0.0


def test_token_cross_entropy_casts_half_precision():
    value = losses.token_cross_entropy(TARGETS, tf.constant(LOGITS, tf.float16))
    assert value.dtype == tf.float32
    assert float(value) == pytest.approx(float(losses.token_cross_entropy(TARGETS, LOGITS)), rel=1e-3)


def test_sequence_cross_entropy_sums_real_tokens():
    value = losses.sequence_cross_entropy(TARGETS, LOGITS).numpy()
    expected = [_neg_log_softmax(LOGITS[0, 0], 1) + _neg_log_softmax(LOGITS[0, 1], 2),
                _neg_log_softmax(LOGITS[1, 0], 3)]
    assert value.shape == (2,)
    np.testing.assert_allclose(value, expected, rtol=1e-6)


def test_probability_cross_entropy_by_hand():
    targets = np.zeros((1, 2, 3), np.float32)
    targets[0, 0, 1] = 1.0
    targets[0, 1, 2] = 1.0
    probs = np.array([[[0.2, 0.5, 0.3], [0.25, 0.75, 0.0]]], np.float32)
    # Position 1's target has probability 0: clipped to 1e-7 as Keras does.
    expected = (-math.log(0.5) - math.log(1e-7)) / 2
    assert float(losses.probability_cross_entropy(targets, probs)) == pytest.approx(expected, rel=1e-5)
    perfect = targets.copy()
    assert float(losses.probability_cross_entropy(targets, perfect)) == pytest.approx(0.0, abs=1e-6)


def test_kl_is_zero_at_the_prior():
    zeros = tf.zeros([5, 3])
    np.testing.assert_array_equal(losses.kl_per_dimension(zeros, zeros).numpy(), np.zeros(3))
    assert float(losses.kl_divergence(zeros, zeros)) == 0.0


def test_kl_by_hand():
    mean = np.array([[1.0, 0.0], [3.0, 0.0]], np.float32)
    log_var = np.array([[0.0, math.log(2.0)], [0.0, 0.0]], np.float32)
    # Per example and dimension: 0.5 * (mean^2 + exp(log_var) - 1 - log_var).
    dim0 = (0.5 * 1.0 + 0.5 * 9.0) / 2  # 2.5
    dim1 = (0.5 * (2.0 - 1.0 - math.log(2.0)) + 0.0) / 2
    np.testing.assert_allclose(losses.kl_per_dimension(mean, log_var).numpy(), [dim0, dim1], rtol=1e-6)
    assert float(losses.kl_divergence(mean, log_var)) == pytest.approx(dim0 + dim1, rel=1e-6)


def test_free_bits_floor_each_dimension_and_stop_its_gradient():
    mean = tf.Variable([[1.0, 0.1]])
    log_var = tf.zeros([1, 2])
    # Per-dimension KL: 0.5 and 0.005; with free bits 0.3 -> max(0.5, .3) + max(0.005, .3).
    assert float(losses.kl_divergence(mean, log_var, free_bits=0.3)) == pytest.approx(0.8, rel=1e-6)
    assert float(losses.kl_divergence(mean, log_var, free_bits=0.0)) == pytest.approx(0.505, rel=1e-6)
    with tf.GradientTape() as tape:
        kl = losses.kl_divergence(mean, log_var, free_bits=0.3)
    grad = tape.gradient(kl, mean).numpy()
    assert grad[0, 0] == pytest.approx(1.0) and grad[0, 1] == 0.0


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
    assert float(losses.kl_weight(step, config)) == pytest.approx(expected, rel=1e-5)
    as_tensor = losses.kl_weight(tf.constant(step, tf.int64), config)
    assert float(as_tensor) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("step, expected", [
    (0, 0.1), (25, 0.3), (50, 0.5), (99, 0.5), (100, 0.1), (125, 0.3), (150, 0.5), (399, 0.5),
])
def test_kl_weight_cyclical(step, expected):
    config = TrainConfig(kl_schedule="cyclical", kl_cycles=4, **KL)
    # 4 cycles over a 400-step run: period 100, rising over the first 50 steps of each.
    assert float(losses.kl_weight(step, config, total_steps=400)) == pytest.approx(expected, rel=1e-5)
    # Without a run length the period is kl_anneal_steps (100) as well.
    assert float(losses.kl_weight(step, config)) == pytest.approx(expected, rel=1e-5)


def test_kl_weight_inside_tf_function():
    config = TrainConfig(kl_schedule="linear", **KL)
    compiled = tf.function(lambda step: losses.kl_weight(step, config), jit_compile=True)
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
    assert float(losses.learning_rate(step, config, total)) == pytest.approx(expected, rel=1e-5)
    assert float(losses.learning_rate(tf.constant(step, tf.int64), config, total)) == pytest.approx(
        expected, rel=1e-5)


@pytest.mark.parametrize("step, factor", [(0, 0.1), (4, 0.5), (9, 1.0), (10, 1.0), (1000, 1.0)])
def test_learning_rate_warmup(step, factor):
    config = TrainConfig(lr_schedule="constant", warmup_steps=10, **LR)
    assert float(losses.learning_rate(step, config, 100)) == pytest.approx(1e-3 * factor, rel=1e-5)


INPUTS = np.array([[1, 5, 6, 7, 2, 0, 0], [1, 4, 4, 2, 0, 0, 0], [1, 8, 9, 10, 11, 12, 2]], np.int32)


def test_word_dropout_never_touches_pad_or_bos():
    out = losses.word_dropout(tf.constant(INPUTS), 1.0, tf.constant([3, 4])).numpy()
    keep = (INPUTS == 0) | (INPUTS == 1)
    np.testing.assert_array_equal(out[keep], INPUTS[keep])
    assert np.all(out[~keep] == 3)


def test_word_dropout_is_deterministic_per_seed():
    inputs = tf.constant(np.tile(INPUTS, (50, 1)))
    first = losses.word_dropout(inputs, 0.5, tf.constant([1, 2])).numpy()
    again = losses.word_dropout(inputs, 0.5, tf.constant([1, 2])).numpy()
    other = losses.word_dropout(inputs, 0.5, tf.constant([1, 3])).numpy()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    droppable = (INPUTS[None] > 1).repeat(50, 0).reshape(first.shape)
    replaced = (first == 3) & droppable
    assert 0.4 < replaced.sum() / droppable.sum() < 0.6
    np.testing.assert_array_equal(first[~droppable], inputs.numpy()[~droppable])
    compiled = tf.function(lambda x, s: losses.word_dropout(x, 0.5, s), jit_compile=True)
    np.testing.assert_array_equal(compiled(inputs, tf.constant([1, 2])).numpy(), first)


def test_word_dropout_rate_zero_is_identity():
    inputs = tf.constant(INPUTS)
    assert losses.word_dropout(inputs, 0.0, tf.constant([0, 0])) is inputs
