"""Tests for seqvae.decoding: the decoding loop driven by stub step functions, no model."""

import numpy as np
import pytest
import tensorflow as tf

from seqvae.errors import SeqvaeError
from seqvae.model.decoding import decode_loop, filter_logits

PAD, BOS, EOS, VOCAB = 0, 1, 2, 10

# Row b emits TABLE[b, t] at step t (when decoding greedily).
TABLE = np.array([
    [4, 5, EOS, 7, 7, 7],
    [6, EOS, 7, 7, 7, 7],
    [8, 9, 4, EOS, 5, 5],
], np.int32)


def table_step(table, calls=None):
    """A step function whose state is the step counter t; it prefers ``table[:, t]``."""
    table = tf.constant(table)

    def step(tokens, t):
        if calls is not None:
            calls.append(int(t))  # eager only: counts how many steps ran
        return 10.0 * tf.one_hot(table[:, t], VOCAB), t + 1

    return step


def test_greedy_follows_the_table_and_pads_after_eos():
    calls = []
    out = decode_loop(table_step(TABLE, calls), tf.constant(0), 3, 6, BOS, EOS, greedy=True)
    assert out.dtype == tf.int32 and out.shape == (3, 6)
    np.testing.assert_array_equal(out.numpy(), [
        [4, 5, EOS, PAD, PAD, PAD],
        [6, EOS, PAD, PAD, PAD, PAD],
        [8, 9, 4, EOS, PAD, PAD],
    ])
    # Every row has emitted <eos> after 4 steps: the loop stops there, not at max_len.
    assert calls == [0, 1, 2, 3]


def test_loop_runs_to_max_len_without_eos():
    calls = []
    table = np.full((2, 5), 7, np.int32)
    out = decode_loop(table_step(table, calls), tf.constant(0), 2, 5, BOS, EOS, greedy=True)
    np.testing.assert_array_equal(out.numpy(), np.full((2, 5), 7))
    assert calls == [0, 1, 2, 3, 4]


def test_step_function_gets_start_token_then_its_own_output():
    seen = []

    def step(tokens, state):
        seen.append(tokens.numpy().tolist())
        return 10.0 * tf.one_hot(tokens + 1, VOCAB), state  # prefer the next id

    out = decode_loop(step, tf.zeros([2]), 2, 8, start_id=5, eos_id=9, greedy=True)
    np.testing.assert_array_equal(out.numpy(), [[6, 7, 8, 9, 0, 0, 0, 0]] * 2)
    assert seen == [[5, 5], [6, 6], [7, 7], [8, 8]]


def test_custom_pad_id_after_eos():
    out = decode_loop(table_step(TABLE), tf.constant(0), 3, 6, BOS, EOS, pad_id=3, greedy=True)
    assert out.numpy()[1].tolist() == [6, EOS, 3, 3, 3, 3]


def test_state_may_be_a_nest():
    def step(tokens, state):
        t, history = state
        logits = 10.0 * tf.one_hot(tf.fill([2], 4 + t), VOCAB)
        return logits, (t + 1, history + tf.cast(tokens, tf.float32))

    out = decode_loop(step, (tf.constant(0), tf.zeros([2])), 2, 4, BOS, EOS, greedy=True)
    np.testing.assert_array_equal(out.numpy(), [[4, 5, 6, 7]] * 2)


RANDOM_LOGITS = np.random.default_rng(0).normal(size=(12, 64, VOCAB)).astype(np.float32)


def random_step(tokens, t):
    """Fixed random logits per step; state is the step counter."""
    return tf.gather(tf.constant(RANDOM_LOGITS), t), t + 1


def sample(**kwargs):
    return decode_loop(random_step, tf.constant(0), 64, 12, BOS, EOS, **kwargs).numpy()


def test_top_k_one_equals_greedy():
    greedy = sample(greedy=True)
    np.testing.assert_array_equal(sample(top_k=1, seed=tf.constant([1, 2])), greedy)
    np.testing.assert_array_equal(sample(top_k=1, temperature=3.0, seed=tf.constant([5, 6])), greedy)
    # A vanishing temperature is greedy too.
    np.testing.assert_array_equal(sample(temperature=1e-4, seed=tf.constant([1, 2])), greedy)


def test_temperature_zero_is_greedy_and_bad_controls_are_rejected():
    np.testing.assert_array_equal(sample(temperature=0.0, seed=tf.constant([1, 2])), sample(greedy=True))
    with pytest.raises(SeqvaeError, match="temperature must be >= 0"):
        sample(temperature=-1.0)
    with pytest.raises(SeqvaeError, match="top_k must be >= 0"):
        sample(top_k=-3)


def test_top_k_above_vocabulary_size_keeps_everything():
    np.testing.assert_array_equal(sample(top_k=VOCAB + 50, seed=tf.constant([1, 2])),
                                  sample(seed=tf.constant([1, 2])))


def test_same_seed_same_samples_different_seed_different():
    first = sample(seed=tf.constant([1, 2]))
    np.testing.assert_array_equal(first, sample(seed=tf.constant([1, 2])))
    assert not np.array_equal(first, sample(seed=tf.constant([1, 3])))
    assert not np.array_equal(first, sample(greedy=True))
    np.testing.assert_array_equal(sample(), sample(seed=tf.constant([0, 0])))  # default seed


def test_samples_are_padded_after_eos():
    for row in sample(seed=tf.constant([4, 4]), temperature=2.0):
        ends = np.flatnonzero(row == EOS)
        if len(ends):
            assert np.all(row[ends[0] + 1:] == PAD)


def test_top_k_restricts_the_choices():
    out = sample(top_k=3, temperature=5.0, seed=tf.constant([7, 7]))
    top3 = np.argsort(RANDOM_LOGITS, axis=-1)[..., -3:]  # (T, B, 3)
    for t in range(out.shape[1]):
        for b in range(out.shape[0]):
            if out[b, t] != PAD:
                assert out[b, t] in top3[t, b]


@pytest.mark.parametrize("temperature", [1.0, 2.0, 0.5])
def test_temperature_sharpens_or_flattens(temperature):
    probs = np.array([0.5, 0.3, 0.2], np.float32)
    rows = 20_000

    def step(tokens, state):
        return tf.math.log(tf.tile(probs[None], [rows, 1])), state

    out = decode_loop(step, tf.constant(0), rows, 1, BOS, eos_id=9, temperature=temperature,
                      seed=tf.constant([3, 1])).numpy()
    expected = probs ** (1 / temperature) / (probs ** (1 / temperature)).sum()
    np.testing.assert_allclose(np.bincount(out[:, 0], minlength=3) / rows, expected, atol=0.015)


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("kwargs", [dict(greedy=True), dict(temperature=0.7, top_k=4)])
def test_same_output_in_tf_function_and_xla(jit_compile, kwargs):
    expected = sample(seed=tf.constant([9, 9]), **kwargs)

    @tf.function(jit_compile=jit_compile)
    def run(logits, seed):
        def step(tokens, t):
            return tf.gather(logits, t), t + 1

        return decode_loop(step, tf.constant(0), tf.shape(logits)[1], 12, BOS, EOS, seed=seed, **kwargs)

    np.testing.assert_array_equal(run(tf.constant(RANDOM_LOGITS), tf.constant([9, 9])).numpy(), expected)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_compiled_loop_stops_early(jit_compile):
    steps = tf.Variable(0)

    @tf.function(jit_compile=jit_compile)
    def run():
        inner = table_step(TABLE)

        def step(tokens, t):
            steps.assign_add(1)
            return inner(tokens, t)

        return decode_loop(step, tf.constant(0), 3, 6, BOS, EOS, greedy=True)

    np.testing.assert_array_equal(run().numpy()[2], [8, 9, 4, EOS, PAD, PAD])
    assert int(steps.numpy()) == 4


def test_filter_logits():
    logits = tf.constant([[1.0, 4.0, 2.0, 3.0], [0.0, -1.0, 5.0, 5.0]])
    np.testing.assert_allclose(filter_logits(logits).numpy(), logits.numpy())
    np.testing.assert_allclose(filter_logits(logits, temperature=2.0).numpy(), logits.numpy() / 2)
    inf = float("-inf")
    np.testing.assert_array_equal(filter_logits(logits, top_k=2).numpy(),
                                  [[inf, 4.0, inf, 3.0], [inf, inf, 5.0, 5.0]])
    np.testing.assert_array_equal(filter_logits(logits, temperature=0.5, top_k=1).numpy(),
                                  [[inf, 8.0, inf, inf], [inf, inf, 10.0, 10.0]])  # ties kept
    np.testing.assert_allclose(filter_logits(logits, top_k=4).numpy(), logits.numpy())
    np.testing.assert_allclose(filter_logits(logits, top_k=100).numpy(), logits.numpy())
    assert filter_logits(tf.constant([[1.0, 2.0]], tf.bfloat16)).dtype == tf.float32


def test_compacting_loop_gives_the_same_samples_and_stops_rows_early():
    """Dropping finished rows must not change any sample (noise is drawn per original row)."""
    import tensorflow as tf

    from seqvae.model.decoding import decode_loop

    vocab, eos = 7, 2
    table = tf.random.stateless_normal([vocab, vocab], seed=[3, 4]) * 2.0

    def step(tokens, state):
        (hidden,) = state
        return tf.gather(table, tokens) + hidden, (hidden * 0.9,)

    state = (tf.random.stateless_normal([16, vocab], seed=[5, 6]),)
    for greedy in (True, False):
        kwargs = dict(batch_size=16, max_len=12, start_id=1, eos_id=eos, greedy=greedy,
                      temperature=0.8, top_k=3, seed=tf.constant([7, 8]))
        fixed = decode_loop(step, state, **kwargs).numpy()
        compact = decode_loop(step, state, compact=True, **kwargs).numpy()
        np.testing.assert_array_equal(fixed, compact)
        compiled = tf.function(lambda: decode_loop(step, state, compact=True, **kwargs))().numpy()
        np.testing.assert_array_equal(fixed, compiled)


# Beam search. A Markov stub: logits depend only on the previous token.
# ids: 0 <pad>, 1 <bos>, 2 <eos>, 3 A, 4 B. Greedy takes A (0.6) then <eos> (0.4): p = 0.24;
# the best sequence is B (0.4) then <eos> (0.99): p = 0.396.
_MARKOV = np.full((5, 5), 1e-6, np.float32)
_MARKOV[1, 3], _MARKOV[1, 4] = 0.6, 0.4
_MARKOV[3, 2], _MARKOV[3, 3], _MARKOV[3, 4] = 0.4, 0.3, 0.3
_MARKOV[4, 2], _MARKOV[4, 3] = 0.99, 0.01
_MARKOV[2, 2] = _MARKOV[0, 2] = 1.0


def _markov_step(tokens, state):
    return tf.math.log(tf.gather(tf.constant(_MARKOV), tokens)), state + 1


def test_beam_search_finds_what_greedy_misses():
    from seqvae.model.decoding import beam_search

    state = tf.zeros([2], tf.int32)
    greedy = decode_loop(_markov_step, state, 2, 4, 1, 2, greedy=True).numpy()
    assert greedy.tolist() == [[3, 2, 0, 0]] * 2  # A <eos>
    ids, scores = beam_search(_markov_step, state, 2, 4, beam_width=2, start_id=1, eos_id=2,
                              length_penalty=0.0)
    assert ids.numpy().tolist() == [[4, 2, 0, 0]] * 2  # B <eos>
    np.testing.assert_allclose(scores.numpy(), np.log(0.4 * 0.99), rtol=1e-5)
    ids, scores = beam_search(_markov_step, state, 2, 4, beam_width=1, start_id=1, eos_id=2)
    assert ids.numpy().tolist() == greedy.tolist()  # width 1 is greedy


def test_beam_search_length_penalty_and_xla():
    from seqvae.model.decoding import beam_search

    state = tf.zeros([3], tf.int32)
    eager = beam_search(_markov_step, state, 3, 6, beam_width=3, start_id=1, eos_id=2)
    compiled = tf.function(lambda s: beam_search(_markov_step, s, 3, 6, beam_width=3, start_id=1,
                                                 eos_id=2), jit_compile=True)(state)
    np.testing.assert_array_equal(eager[0].numpy(), compiled[0].numpy())
    np.testing.assert_allclose(eager[1].numpy(), compiled[1].numpy(), rtol=1e-5)
    ids = eager[0].numpy()
    assert all(2 in row and (row[list(row).index(2) + 1:] == 0).all() for row in ids)
    with pytest.raises(SeqvaeError, match="beam width"):
        beam_search(_markov_step, state, 3, 6, beam_width=0, start_id=1, eos_id=2)


def test_forced_prefix_rows_emit_their_prefix_then_decode_freely():
    from seqvae.model.decoding import forced_prefix_step_fn

    prefix = tf.constant([[7, 7, 3], [3, 0, 0], [5, 5, 5]], tf.int32)
    lengths = tf.constant([2, 1, 0], tf.int32)
    step, state = forced_prefix_step_fn(table_step(TABLE), tf.constant(0), prefix, lengths)
    out = decode_loop(step, state, 3, 6, BOS, EOS, greedy=True)
    np.testing.assert_array_equal(out.numpy(), [
        [7, 7, EOS, PAD, PAD, PAD],  # the table's own row 0 resumes at step 2: <eos>
        [3, EOS, PAD, PAD, PAD, PAD],
        [8, 9, 4, EOS, PAD, PAD],  # length 0: untouched
    ])


@pytest.mark.parametrize("greedy", [True, False])
def test_forced_prefix_sampled_compacted_and_compiled_agree(greedy):
    """Sampling never leaves the prefix; the compacting loop (which drops finished rows, and
    with them their prefix state) and tf.function give the same ids."""
    from seqvae.model.decoding import forced_prefix_step_fn

    vocab, eos = 7, 2
    table = tf.random.stateless_normal([vocab, vocab], seed=[3, 4]) * 2.0

    def step(tokens, state):
        (hidden,) = state
        return tf.gather(table, tokens) + hidden, (hidden * 0.9,)

    rows = 16
    prefix = tf.constant(np.tile([[3, 4, 5, 6, 3]], (rows, 1)), tf.int32)
    lengths = tf.constant(np.arange(rows) % 6, tf.int32)
    inner = (tf.random.stateless_normal([rows, vocab], seed=[5, 6]),)
    kwargs = dict(batch_size=rows, max_len=12, start_id=1, eos_id=eos, greedy=greedy,
                  temperature=1.5, seed=tf.constant([7, 8]))

    def run(compact):
        forced, state = forced_prefix_step_fn(step, inner, prefix, lengths)
        return decode_loop(forced, state, compact=compact, **kwargs)

    fixed = run(False).numpy()
    for i, n in enumerate(lengths.numpy()):
        np.testing.assert_array_equal(fixed[i, :n], prefix.numpy()[i, :n])
    np.testing.assert_array_equal(fixed, run(True).numpy())
    np.testing.assert_array_equal(fixed, tf.function(lambda: run(True))().numpy())
    free = decode_loop(step, inner, **kwargs).numpy()
    np.testing.assert_array_equal(fixed[lengths.numpy() == 0], free[lengths.numpy() == 0])


@pytest.mark.parametrize("pending, rejected, drawn, expected", [
    # q = 0.1128: 127.24 expected rejections + 3 sqrt(128.24) = 161.21, / 0.8872 -> 182 spares
    (1128, 1128, 10_000, 1128 + 182),
    (1, 1, 1000, 1 + 1),  # (0.001 + 3 sqrt(1.001)) / 0.999 = 3.01 -> 4 spares, at most P = 1
    (10, 0, 1000, 10 + 3),  # nothing rejected: 3 sqrt(1) = 3 spares
    (40, 50, 50, 80),  # everything rejected: the spares capped at P
    (0, 5, 10, 0),
])
def test_rejection_attempts_draws_the_pending_rows_and_spares(pending, rejected, drawn, expected):
    from seqvae.model.decoding import rejection_attempts

    assert int(rejection_attempts(pending, rejected, drawn)) == expected
    traced = tf.function(rejection_attempts)(tf.constant(pending), tf.constant(rejected),
                                             tf.constant(drawn))
    assert traced.dtype == tf.int32 and int(traced) == expected
