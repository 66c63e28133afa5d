"""Tests for seqvae.losses: hand-computed loss values and every schedule at chosen steps."""

import math

import numpy as np
import pytest
import tensorflow as tf

from seqvae.model import likelihood
from seqvae.training import objective

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
    value = likelihood.token_cross_entropy(TARGETS, LOGITS)
    assert value.dtype == tf.float32 and value.shape == ()
    assert float(value) == pytest.approx(sum(real) / 3, rel=1e-6)


def test_padding_is_masked_in_value_and_gradient():
    changed = LOGITS.copy()
    changed[0, 2] = [-50.0, 50.0, 0.0, 0.0]  # padding positions: any scores
    changed[1, 1:] = 123.0
    assert float(likelihood.token_cross_entropy(TARGETS, changed)) == pytest.approx(
        float(likelihood.token_cross_entropy(TARGETS, LOGITS)), rel=1e-6)
    logits = tf.Variable(LOGITS)
    with tf.GradientTape() as tape:
        loss = likelihood.token_cross_entropy(TARGETS, logits)
    grad = tape.gradient(loss, logits).numpy()
    mask = TARGETS != 0
    assert np.all(grad[~mask] == 0.0)
    assert np.all(np.abs(grad[mask]).sum(-1) > 0)


def test_token_cross_entropy_all_padding_is_zero_not_nan():
    assert float(likelihood.token_cross_entropy(np.zeros((2, 3), np.int32), LOGITS)) == 0.0


def test_token_cross_entropy_casts_half_precision():
    value = likelihood.token_cross_entropy(TARGETS, tf.constant(LOGITS, tf.float16))
    assert value.dtype == tf.float32
    assert float(value) == pytest.approx(float(likelihood.token_cross_entropy(TARGETS, LOGITS)), rel=1e-3)


def test_sequence_cross_entropy_sums_real_tokens():
    value = likelihood.sequence_cross_entropy(TARGETS, LOGITS).numpy()
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
    assert float(likelihood.probability_cross_entropy(targets, probs)) == pytest.approx(expected, rel=1e-5)
    perfect = targets.copy()
    assert float(likelihood.probability_cross_entropy(targets, perfect)) == pytest.approx(0.0, abs=1e-6)


def test_kl_is_zero_at_the_prior():
    zeros = tf.zeros([5, 3])
    np.testing.assert_array_equal(likelihood.kl_per_dimension(zeros, zeros).numpy(), np.zeros(3))
    assert float(likelihood.kl_divergence(zeros, zeros)) == 0.0


def test_kl_by_hand():
    mean = np.array([[1.0, 0.0], [3.0, 0.0]], np.float32)
    log_var = np.array([[0.0, math.log(2.0)], [0.0, 0.0]], np.float32)
    # Per example and dimension: 0.5 * (mean^2 + exp(log_var) - 1 - log_var).
    dim0 = (0.5 * 1.0 + 0.5 * 9.0) / 2  # 2.5
    dim1 = (0.5 * (2.0 - 1.0 - math.log(2.0)) + 0.0) / 2
    np.testing.assert_allclose(likelihood.kl_per_dimension(mean, log_var).numpy(), [dim0, dim1], rtol=1e-6)
    assert float(likelihood.kl_divergence(mean, log_var)) == pytest.approx(dim0 + dim1, rel=1e-6)


def test_free_bits_floor_each_dimension_and_stop_its_gradient():
    mean = tf.Variable([[1.0, 0.1]])
    log_var = tf.zeros([1, 2])
    # Per-dimension KL: 0.5 and 0.005; with free bits 0.3 -> max(0.5, .3) + max(0.005, .3).
    assert float(likelihood.kl_divergence(mean, log_var, free_bits=0.3)) == pytest.approx(0.8, rel=1e-6)
    assert float(likelihood.kl_divergence(mean, log_var, free_bits=0.0)) == pytest.approx(0.505, rel=1e-6)
    with tf.GradientTape() as tape:
        kl = likelihood.kl_divergence(mean, log_var, free_bits=0.3)
    grad = tape.gradient(kl, mean).numpy()
    assert grad[0, 0] == pytest.approx(1.0) and grad[0, 1] == 0.0


INPUTS = np.array([[1, 5, 6, 7, 2, 0, 0], [1, 4, 4, 2, 0, 0, 0], [1, 8, 9, 10, 11, 12, 2]], np.int32)


def test_word_dropout_never_touches_pad_or_bos():
    out = objective.word_dropout(tf.constant(INPUTS), 1.0, tf.constant([3, 4])).numpy()
    keep = (INPUTS == 0) | (INPUTS == 1)
    np.testing.assert_array_equal(out[keep], INPUTS[keep])
    assert np.all(out[~keep] == 3)


def test_word_dropout_is_deterministic_per_seed():
    inputs = tf.constant(np.tile(INPUTS, (50, 1)))
    first = objective.word_dropout(inputs, 0.5, tf.constant([1, 2])).numpy()
    again = objective.word_dropout(inputs, 0.5, tf.constant([1, 2])).numpy()
    other = objective.word_dropout(inputs, 0.5, tf.constant([1, 3])).numpy()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    droppable = (INPUTS[None] > 1).repeat(50, 0).reshape(first.shape)
    replaced = (first == 3) & droppable
    assert 0.4 < replaced.sum() / droppable.sum() < 0.6
    np.testing.assert_array_equal(first[~droppable], inputs.numpy()[~droppable])
    compiled = tf.function(lambda x, s: objective.word_dropout(x, 0.5, s), jit_compile=True)
    np.testing.assert_array_equal(compiled(inputs, tf.constant([1, 2])).numpy(), first)


def test_word_dropout_rate_zero_is_identity():
    inputs = tf.constant(INPUTS)
    assert objective.word_dropout(inputs, 0.0, tf.constant([0, 0])) is inputs


def _peaked_logits(tokens: np.ndarray, vocab: int = 13) -> tf.Tensor:
    """Logits ``(B, T, V)`` that put all the probability on ``tokens (B, T)``."""
    return tf.constant(np.eye(vocab, dtype=np.float32)[tokens] * 100.0)


def test_own_sample_inputs_reads_the_prediction_of_the_step_before():
    predicted = (INPUTS + 3) % 13  # what the model "predicts" at each step: never the truth
    out = objective.own_sample_inputs(tf.constant(INPUTS), _peaked_logits(predicted), 1.0,
                                      tf.constant([5, 6])).numpy()
    keep = (INPUTS == 0) | (INPUTS == 1)
    np.testing.assert_array_equal(out[keep], INPUTS[keep])
    # input t (t >= 1) is replaced by the draw from step t - 1's distribution
    np.testing.assert_array_equal(out[:, 1:][~keep[:, 1:]], predicted[:, :-1][~keep[:, 1:]])


def test_own_sample_inputs_rate_seed_and_xla():
    inputs = np.tile(INPUTS, (60, 1))
    logits = _peaked_logits((inputs + 3) % 13)
    first = objective.own_sample_inputs(tf.constant(inputs), logits, 0.25, tf.constant([1, 2])).numpy()
    again = objective.own_sample_inputs(tf.constant(inputs), logits, 0.25, tf.constant([1, 2])).numpy()
    other = objective.own_sample_inputs(tf.constant(inputs), logits, 0.25, tf.constant([1, 3])).numpy()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    replaceable = inputs > 1
    assert 0.18 < (first != inputs)[replaceable].mean() < 0.32
    assert np.all(first[~replaceable] == inputs[~replaceable])
    compiled = tf.function(lambda x, l, s: objective.own_sample_inputs(x, l, 0.25, s),
                           jit_compile=True)
    np.testing.assert_array_equal(compiled(tf.constant(inputs), logits, tf.constant([1, 2])), first)
    zero = objective.own_sample_inputs(tf.constant(inputs), logits, 0.0, tf.constant([1, 2]))
    np.testing.assert_array_equal(zero.numpy(), inputs)


def test_own_sample_inputs_draw_from_the_distribution():
    """Uniform logits over two tokens: each is drawn about half the time."""
    inputs = np.full((400, 6), 4, np.int32)
    inputs[:, 0] = 1
    logits = np.full((400, 6, 13), -1e9, np.float32)
    logits[..., 7] = logits[..., 8] = 0.0
    out = objective.own_sample_inputs(tf.constant(inputs), tf.constant(logits), 1.0,
                                      tf.constant([0, 9])).numpy()[:, 1:]
    assert set(np.unique(out)) == {7, 8}
    assert 0.45 < (out == 7).mean() < 0.55
