"""Validation split, batch plans, padding and the tf.data pipeline."""

import importlib.util

import numpy as np
import pytest
import tensorflow as tf

from seqvae.data import batching
from seqvae.data.sources import read_sequences

HAS_MOSES = importlib.util.find_spec("moses") is not None


def realistic_lengths(count=5000, seed=0):
    """Token lengths spread like SMILES of drug-like molecules (roughly 10 to 60)."""
    return np.clip(np.random.default_rng(seed).normal(36, 9, count).round(), 8, 60).astype(np.int32)


def test_validation_split_is_seeded_sorted_and_disjoint():
    train, val = batching.validation_split(100, 0.1, seed=3)
    assert len(val) == 10 and len(train) == 90
    assert not set(train) & set(val) and sorted(set(train) | set(val)) == list(range(100))
    assert np.all(np.diff(train) > 0) and np.all(np.diff(val) > 0)
    again_train, again_val = batching.validation_split(100, 0.1, seed=3)
    np.testing.assert_array_equal(val, again_val)
    np.testing.assert_array_equal(train, again_train)
    assert not np.array_equal(val, batching.validation_split(100, 0.1, seed=4)[1])
    assert len(batching.validation_split(1, 0.5, 0)[1]) == 0
    assert len(batching.validation_split(10, 0.0, 0)[1]) == 0


@pytest.mark.parametrize("bucket", [True, False])
def test_batch_plan_covers_every_row_once(bucket):
    lengths = realistic_lengths(1003)
    plan = batching.batch_plan(lengths, 16, seed=1, epoch=0, bucket=bucket, pool_batches=4)
    assert all(1 <= len(b) <= 16 for b in plan) and len(plan) == 63
    rows = np.concatenate(plan)
    assert sorted(rows.tolist()) == list(range(1003))


@pytest.mark.parametrize("bucket", [True, False])
def test_batch_plan_is_a_function_of_seed_and_epoch(bucket):
    lengths = realistic_lengths(500)

    def plan(seed, epoch):
        return np.concatenate(batching.batch_plan(lengths, 32, seed, epoch, bucket=bucket, pool_batches=4))

    np.testing.assert_array_equal(plan(0, 0), plan(0, 0))
    np.testing.assert_array_equal(plan(5, 3), plan(5, 3))
    assert not np.array_equal(plan(0, 0), plan(0, 1))
    assert not np.array_equal(plan(0, 0), plan(1, 0))


def test_bucketing_reduces_padding():
    lengths = realistic_lengths()
    bucketed = batching.batch_plan(lengths, 64, seed=0, epoch=0, bucket=True)
    shuffled = batching.batch_plan(lengths, 64, seed=0, epoch=0, bucket=False)
    with_buckets = batching.padding_fraction(lengths, bucketed, 8, 64)
    without = batching.padding_fraction(lengths, shuffled, 8, 64)
    assert 0.0 < with_buckets < 0.15 < without
    # Within a bucketed batch the lengths are close together.
    spreads = [np.ptp(lengths[b]) for b in bucketed]
    assert np.median(spreads) <= 2


def test_padded_length_and_padding_fraction_by_hand():
    lengths = np.array([3, 5, 9, 16])
    assert batching.padded_length(lengths[:2], 4, 20) == 8
    assert batching.padded_length(lengths[2:3], 4, 20) == 12
    assert batching.padded_length(lengths[3:], 8, 12) == 12  # capped at max_len
    batches = [np.array([0, 1]), np.array([2, 3])]
    # Batch 1: 2 x 8 positions, batch 2: 2 x 16; real tokens 33 of 48.
    assert batching.padding_fraction(lengths, batches, 8, 16) == pytest.approx(1 - 33 / 48)
    assert batching.padding_fraction(np.array([8, 8]), [np.array([0, 1])], 8, 16) == 0.0


@pytest.mark.parametrize("max_len", [24, 21])
def test_make_dataset_yields_int32_batches_padded_to_bucket_width(max_len):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, max_len + 1, 100).astype(np.int32)
    ids = np.zeros((100, max_len), np.int32)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(4, 20, length)
        ids[row, length - 1] = 2
    plan = batching.batch_plan(lengths, 16, seed=0, epoch=0)
    batches = list(batching.make_dataset(ids, lengths, plan, bucket_width=8))
    assert len(batches) == len(plan)
    for batch, rows in zip(batches, plan):
        assert batch.dtype == tf.int32 and batch.shape[0] == len(rows)
        width = batch.shape[1]
        assert width == min(max_len, -(-lengths[rows].max() // 8) * 8)
        assert width % 8 == 0 or width == max_len
        np.testing.assert_array_equal(batch.numpy(), ids[rows, :width])  # no token cut off
        assert np.all(ids[rows, width:] == 0)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_MOSES, reason="molsets is not installed")
def test_moses_padding_fraction_with_and_without_buckets():
    from seqvae.data.tokenizers import SmilesTokenizer

    tokenizer = SmilesTokenizer()
    texts = read_sequences("moses:train").texts
    lengths = np.fromiter((len(tokenizer.tokenize(t)) + 1 for t in texts), np.int32, len(texts))
    max_len = int(lengths.max())
    results = {}
    for batch_size in (128, 512):
        for bucket in (True, False):
            plan = batching.batch_plan(lengths, batch_size, seed=0, epoch=0, bucket=bucket)
            for width in (8, 1):
                results[batch_size, bucket, width] = batching.padding_fraction(lengths, plan, width, max_len)
    print(f"\nMOSES train: {len(texts)} sequences, max_len {max_len}, mean length {lengths.mean():.2f}")
    for (batch_size, bucket, width), value in results.items():
        print(f"  batch {batch_size} {'bucketed' if bucket else 'shuffled'} bucket_width {width}: "
              f"padding {100 * value:.2f}%")
    for batch_size in (128, 512):
        assert results[batch_size, True, 8] < results[batch_size, False, 8] / 2
