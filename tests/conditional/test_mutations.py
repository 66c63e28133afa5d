"""seqvae.conditional.mutations: one token of a kernel's molecule rewritten, the rest decoded."""

import numpy as np
import pytest

from seqvae.conditional import kernels as kernel_lib
from seqvae.conditional import mutations
from seqvae.data.vocabulary import BOS_ID, EOS_ID, PAD_ID


def hand_ids():
    """Two rows of 6 and 2 tokens (ids 4..9, 4..5), <eos>-ended, padded to 10."""
    ids = np.full((2, 10), PAD_ID, np.int32)
    ids[0, :6], ids[0, 6] = np.arange(4, 10), EOS_ID
    ids[1, :2], ids[1, 2] = [4, 5], EOS_ID
    return ids


def test_a_rewrite_changes_one_token_of_the_second_half_and_ends_the_prefix_there():
    ids = hand_ids()
    tokens = np.full((2, 10, 2), 12, np.int16)
    weights = np.zeros((2, 10, 2), np.float16)
    weights[:, :, 0] = 1.0  # token 12 everywhere, the second alternative never
    rng = np.random.default_rng(0)
    for _ in range(50):
        prefix, lengths = mutations.rewrite(ids, tokens, weights, rng)
        position = lengths[0] - 1
        assert 3 <= position <= 5  # the last half of 6 tokens
        assert prefix[0, position] == 12
        assert (prefix[0, :position] == ids[0, :position]).all()
        assert lengths[1] in (2,)  # the last half of 2 tokens: the second
        assert prefix[1, 1] == 12 and prefix[1, 0] == 4


def test_a_rewrite_draws_the_token_by_weight_and_skips_rows_with_none():
    ids = hand_ids()
    tokens = np.zeros((2, 10, 2), np.int16)
    tokens[..., 0], tokens[..., 1] = 12, 13
    weights = np.zeros((2, 10, 2), np.float16)
    weights[0, :, 0], weights[0, :, 1] = 0.25, 0.75
    rng = np.random.default_rng(1)
    drawn = []
    for _ in range(2000):
        prefix, lengths = mutations.rewrite(ids, tokens, weights, rng)
        drawn.append(prefix[0, lengths[0] - 1])
        assert lengths[1] == 0 and (prefix[1] == ids[1]).all()  # no weight: left as it was
    assert np.mean(np.array(drawn) == 13) == pytest.approx(0.75, abs=0.03)


def test_the_alternatives_leave_out_the_own_token_and_the_special_ones(run):
    _, means, _, ids = kernel_lib.encoded_kernels(run, ["CCO", "c1ccccc1O", "CC(=O)O"])
    tokens, weights = mutations.alternatives(run, ids, means, count=3)
    assert tokens.shape == weights.shape == ids.shape + (3,)
    assert np.isfinite(weights).all() and (weights >= 0).all()
    kept = weights > 0
    assert kept.any()
    own = np.broadcast_to(ids[..., None], tokens.shape)
    assert not (kept & (tokens == own)).any()
    for special in (PAD_ID, BOS_ID, EOS_ID):
        assert not (kept & (tokens == special)).any()
    assert (np.diff(weights.astype(np.float32), axis=-1) <= 0).all()  # likeliest first


def test_rewrites_follow_the_kernels_and_keep_only_grammatical_prefixes(run):
    _, means, _, ids = kernel_lib.encoded_kernels(run, ["CCO", "c1ccccc1O"])
    rewrites = mutations.Rewrites(run, ids, means)
    _, more_means, _, more_ids = kernel_lib.encoded_kernels(run, ["CC(=O)Nc1ccc(O)cc1"])
    rewrites.add(more_ids, more_means)
    assert len(rewrites.ids) == len(rewrites.tokens) == 3
    rng = np.random.default_rng(0)
    chosen = np.array([2, -1, 0, 2, 1] * 40)
    prefix, lengths = rewrites.draw(chosen, rng)
    assert (lengths[chosen < 0] == 0).all()  # the prior's draws are free
    rewritten = np.flatnonzero(lengths > 0)
    assert len(rewritten) > 0
    first = mutations.inference.first_violations(run, prefix[rewritten], compiled=False)
    assert ((first < 0) | (first >= lengths[rewritten])).all()
    for row in rewritten:
        source = rewrites.ids[chosen[row]]
        end = lengths[row] - 1
        assert (prefix[row, :end] == source[:end]).all() and prefix[row, end] != source[end]


def test_the_modes_try_both_then_keep_to_the_faster_and_still_look_at_the_other():
    modes = mutations.Modes(seed=0)
    tried = []
    for _ in range(2 * mutations.TRIALS):
        mode = modes.next()
        tried.append(mode)
        modes.record(mode, new=50 if mode else 10, seconds=10.0 if tried.count(mode) == 1 else 1.0)
    assert tried == [0] * mutations.TRIALS + [1] * mutations.TRIALS
    decay = mutations.DECAY
    assert modes.hits[0] == pytest.approx(10 * decay ** 3 + 10 * decay ** 2)  # the first of
    assert modes.hits[1] == pytest.approx(50 * decay + 50)  # each left out (it traces)
    later = [modes.next() for _ in range(2000)]
    assert np.mean(later) == pytest.approx(1 - mutations.EXPLORE, abs=0.03)
    for _ in range(30):  # the rewrites slow down: the free mode takes over
        modes.record(1, new=5, seconds=1.0)
    modes.record(0, new=10, seconds=1.0)  # and a fresh look at it outweighs its old batches
    assert np.mean([modes.next() for _ in range(2000)]) == pytest.approx(mutations.EXPLORE,
                                                                          abs=0.03)
