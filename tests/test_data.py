"""Tests for seqvae.data: every source format, one-line errors, splits and bucketed batches."""

import gzip
import importlib.util

import numpy as np
import pytest
import tensorflow as tf

from seqvae import data
from seqvae.errors import SeqvaeError

HAS_MOSES = importlib.util.find_spec("moses") is not None


def error_of(source, **kwargs) -> str:
    with pytest.raises(SeqvaeError) as info:
        data.read_sequences(source, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- text files --------------------------------------------------------------------------------


def test_smi_skips_comments_and_blank_lines_and_takes_the_first_column(tmp_path):
    path = tmp_path / "mols.smi"
    path.write_text("# a comment\nCCO ethanol\n\n   \nc1ccccc1\tbenzene 3\n  # indented comment\nCl\n")
    seqs = data.read_sequences(path)
    assert seqs.texts == ["CCO", "c1ccccc1", "Cl"]
    assert seqs.line_numbers == [2, 5, 7]
    assert seqs.source == str(path) and seqs.one_hot_classes == 0


def test_txt_and_crlf_and_limit(tmp_path):
    path = tmp_path / "mols.txt"
    path.write_bytes(b"CCO\r\nCCN\r\nCCC\r\n")
    assert data.read_sequences(path).texts == ["CCO", "CCN", "CCC"]
    assert data.read_sequences(path, limit=2).texts == ["CCO", "CCN"]


def test_csv_and_tsv_named_column(tmp_path):
    csv_path = tmp_path / "mols.csv"
    csv_path.write_text('id,smiles,name\n1,CCO,"ethanol, dry"\n2,,empty\n3, c1ccccc1 ,benzene\n')
    seqs = data.read_sequences(csv_path, column="smiles")
    assert seqs.texts == ["CCO", "c1ccccc1"] and seqs.line_numbers == [2, 4]
    quoted = tmp_path / "quoted.csv"
    quoted.write_text('SMILES,note\nCCO,"two\nlines"\n\nCCN,x\n')
    assert data.read_sequences(quoted).line_numbers == [2, 5]  # file lines, not record numbers
    tsv_path = tmp_path / "mols.tsv"
    tsv_path.write_text("SMILES\tscore\nCCO\t1\nCCN\t2\n")
    assert data.read_sequences(tsv_path).texts == ["CCO", "CCN"]


def test_csv_with_byte_order_mark(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes("SMILES,x\nCCO,1\n".encode("utf-8-sig"))
    assert data.read_sequences(path).texts == ["CCO"]


def test_csv_missing_column_names_file_and_line_1(tmp_path):
    path = tmp_path / "mols.csv"
    path.write_text("id,smiles\n1,CCO\n")
    message = error_of(path)
    assert message.startswith(f"{path}:1: no column 'SMILES'") and "id, smiles" in message


def test_missing_column_message_stays_one_line(tmp_path):
    path = tmp_path / "odd.csv"
    path.write_text('"first\nheader",\x11\n1,2\n')
    assert "'first\\nheader', '\\x11'" in error_of(path)


def test_gzipped_text_and_csv(tmp_path):
    smi = tmp_path / "mols.smi.gz"
    with gzip.open(smi, "wt") as out:
        out.write("CCO\n# c\nCCN\n")
    assert data.read_sequences(smi).texts == ["CCO", "CCN"]
    csv_path = tmp_path / "mols.csv.gz"
    with gzip.open(csv_path, "wt") as out:
        out.write("SMILES\nCCO\nc1ccccc1\n")
    assert data.read_sequences(csv_path).texts == ["CCO", "c1ccccc1"]


# --- arrays and lists --------------------------------------------------------------------------


def test_one_hot_npy(tmp_path):
    ids = np.array([[2, 0, 1, -1], [1, 1, -1, -1]])
    one_hot = np.zeros((2, 4, 3), np.float32)
    for n, row in enumerate(ids):
        for t, c in enumerate(row):
            if c >= 0:
                one_hot[n, t, c] = 1.0
    path = tmp_path / "x.npy"
    np.save(path, one_hot)
    seqs = data.read_sequences(path)
    assert seqs.texts == ["2 0 1", "1 1"] and seqs.one_hot_classes == 3
    assert data.read_sequences(one_hot.astype(bool)).texts == ["2 0 1", "1 1"]


def test_class_id_npy_and_arrays(tmp_path):
    ids = np.array([[4, 0, 2, -1], [1, 1, 1, 1], [3, -1, -1, -1]], np.int64)
    path = tmp_path / "ids.npy"
    np.save(path, ids)
    seqs = data.read_sequences(path, limit=2)
    assert seqs.texts == ["4 0 2", "1 1 1 1"] and seqs.one_hot_classes == 5
    assert data.read_sequences(ids).source == "array"


def test_lists():
    seqs = data.read_sequences(["CCO", "CCN"])
    assert seqs.texts == ["CCO", "CCN"] and seqs.line_numbers == [1, 2] and seqs.source == "list"
    assert data.read_sequences(("a", "b", "c"), limit=1).texts == ["a"]
    assert "empty" in error_of([])


# --- errors ------------------------------------------------------------------------------------


def test_missing_empty_and_directory(tmp_path):
    assert error_of(tmp_path / "nope.smi") == f"{tmp_path / 'nope.smi'}: no such file"
    empty = tmp_path / "empty.smi"
    empty.write_bytes(b"")
    assert "the file is empty" in error_of(empty)
    assert "is a directory" in error_of(tmp_path)
    comments = tmp_path / "comments.smi"
    comments.write_text("# only\n\n")
    assert "no sequences found" in error_of(comments)
    header_only = tmp_path / "header.csv"
    header_only.write_text("SMILES\n")
    assert "no sequences in column 'SMILES'" in error_of(header_only)


def test_binary_garbage_with_nul_bytes(tmp_path):
    for name in ("garbage.smi", "garbage.csv"):
        path = tmp_path / name
        path.write_bytes(bytes(range(256)) * 4)
        assert error_of(path).startswith(f"{path}: looks like a binary file")


def test_non_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin1.smi"
    path.write_bytes(b"CCO\n" * 3000 + "CC(=O)O café\n".encode("latin-1") + b"CCN\n")
    assert error_of(path).startswith(f"{path}:3001: not UTF-8")
    csv_path = tmp_path / "latin1.csv"
    csv_path.write_bytes(b"SMILES,name\n" + b"CCO,x\n\n" * 10 + "CCO,caf\xe9\n".encode("latin-1"))
    assert error_of(csv_path).startswith(f"{csv_path}:22: not UTF-8")
    gz_path = tmp_path / "latin1.smi.gz"
    with gzip.open(gz_path, "wb") as out:
        out.write(b"CCO\nC\xffC\n")
    assert error_of(gz_path).startswith(f"{gz_path}:2: not UTF-8")


def test_not_gzip_but_named_gz(tmp_path):
    path = tmp_path / "plain.smi.gz"
    path.write_text("CCO\n")
    assert "cannot read" in error_of(path)


@pytest.mark.parametrize("array, fragment", [
    (np.zeros(5, np.int32), "expected shape (N, T, C) one-hot or (N, T) class ids"),
    (np.zeros((2, 3, 4, 5), np.float32), "expected shape (N, T, C)"),
    (np.array([[0.5, 1.0]], np.float32), "must hold integer class ids"),
    (np.array([[1, -2]], np.int32), "class ids must be >= 0"),
    (np.full((2, 3, 4), 0.5, np.float32), "must be one-hot"),
    (np.ones((2, 3, 4), np.float32), "must be one-hot"),
    (np.zeros((0, 3, 4), np.float32), "empty one-hot array"),
    (np.array([["a", "b"]]), "expected a numeric array"),
    (np.full((2, 3), -1, np.int64), "holds no tokens"),
    (np.zeros((2, 3, 4), np.float32), "holds no tokens"),
])
def test_bad_npy(tmp_path, array, fragment):
    path = tmp_path / "bad.npy"
    np.save(path, array)
    message = error_of(path)
    assert message.startswith(str(path)) and fragment in message
    assert fragment in error_of(array)


def test_unreadable_npy(tmp_path):
    path = tmp_path / "text.npy"
    path.write_text("CCO\n")
    assert "not a readable .npy array" in error_of(path)
    truncated = tmp_path / "truncated.npy"
    np.save(truncated, np.zeros((10, 5, 4), np.float32))
    truncated.write_bytes(truncated.read_bytes()[:-50])
    assert "not a readable .npy array" in error_of(truncated)
    archive = tmp_path / "archive.npy"
    with open(archive, "wb") as out:
        np.savez(out, x=np.zeros((2, 3)))
    assert "is a .npz archive" in error_of(archive)
    pickled = tmp_path / "objects.npy"
    np.save(pickled, np.array([["CCO"], [None]], dtype=object), allow_pickle=True)
    assert "not a readable .npy array" in error_of(pickled)


# --- MOSES -------------------------------------------------------------------------------------


@pytest.mark.skipif(not HAS_MOSES, reason="molsets is not installed")
def test_moses_train_resolves():
    seqs = data.read_sequences("moses:train", limit=5)
    assert len(seqs.texts) == 5 and seqs.source == "moses:train"
    assert seqs.line_numbers == [2, 3, 4, 5, 6]
    assert data.moses_file("test").endswith("test.csv.gz")


def test_moses_unknown_split():
    assert "unknown MOSES split 'bogus'" in error_of("moses:bogus")


# --- splits and batches ------------------------------------------------------------------------


def test_validation_split_is_seeded_sorted_and_disjoint():
    train, val = data.validation_split(100, 0.1, seed=3)
    assert len(val) == 10 and len(train) == 90
    assert not set(train) & set(val) and sorted(set(train) | set(val)) == list(range(100))
    assert np.all(np.diff(train) > 0) and np.all(np.diff(val) > 0)
    again_train, again_val = data.validation_split(100, 0.1, seed=3)
    np.testing.assert_array_equal(val, again_val)
    np.testing.assert_array_equal(train, again_train)
    assert not np.array_equal(val, data.validation_split(100, 0.1, seed=4)[1])
    assert len(data.validation_split(1, 0.5, 0)[1]) == 0
    assert len(data.validation_split(10, 0.0, 0)[1]) == 0


def realistic_lengths(count=5000, seed=0):
    """Token lengths spread like SMILES of drug-like molecules (roughly 10 to 60)."""
    return np.clip(np.random.default_rng(seed).normal(36, 9, count).round(), 8, 60).astype(np.int32)


@pytest.mark.parametrize("bucket", [True, False])
def test_batch_plan_covers_every_row_once(bucket):
    lengths = realistic_lengths(1003)
    plan = data.batch_plan(lengths, 16, seed=1, epoch=0, bucket=bucket, pool_batches=4)
    assert all(1 <= len(b) <= 16 for b in plan) and len(plan) == 63
    rows = np.concatenate(plan)
    assert sorted(rows.tolist()) == list(range(1003))


@pytest.mark.parametrize("bucket", [True, False])
def test_batch_plan_is_a_function_of_seed_and_epoch(bucket):
    lengths = realistic_lengths(500)

    def plan(seed, epoch):
        return np.concatenate(data.batch_plan(lengths, 32, seed, epoch, bucket=bucket, pool_batches=4))

    np.testing.assert_array_equal(plan(0, 0), plan(0, 0))
    np.testing.assert_array_equal(plan(5, 3), plan(5, 3))
    assert not np.array_equal(plan(0, 0), plan(0, 1))
    assert not np.array_equal(plan(0, 0), plan(1, 0))


def test_bucketing_reduces_padding():
    lengths = realistic_lengths()
    bucketed = data.batch_plan(lengths, 64, seed=0, epoch=0, bucket=True)
    shuffled = data.batch_plan(lengths, 64, seed=0, epoch=0, bucket=False)
    with_buckets = data.padding_fraction(lengths, bucketed, 8, 64)
    without = data.padding_fraction(lengths, shuffled, 8, 64)
    assert 0.0 < with_buckets < 0.15 < without
    # Within a bucketed batch the lengths are close together.
    spreads = [np.ptp(lengths[b]) for b in bucketed]
    assert np.median(spreads) <= 2


def test_padded_length_and_padding_fraction_by_hand():
    lengths = np.array([3, 5, 9, 16])
    assert data.padded_length(lengths[:2], 4, 20) == 8
    assert data.padded_length(lengths[2:3], 4, 20) == 12
    assert data.padded_length(lengths[3:], 8, 12) == 12  # capped at max_len
    batches = [np.array([0, 1]), np.array([2, 3])]
    # Batch 1: 2 x 8 positions, batch 2: 2 x 16; real tokens 33 of 48.
    assert data.padding_fraction(lengths, batches, 8, 16) == pytest.approx(1 - 33 / 48)
    assert data.padding_fraction(np.array([8, 8]), [np.array([0, 1])], 8, 16) == 0.0


@pytest.mark.parametrize("max_len", [24, 21])
def test_make_dataset_yields_int32_batches_padded_to_bucket_width(max_len):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, max_len + 1, 100).astype(np.int32)
    ids = np.zeros((100, max_len), np.int32)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(4, 20, length)
        ids[row, length - 1] = 2
    plan = data.batch_plan(lengths, 16, seed=0, epoch=0)
    batches = list(data.make_dataset(ids, lengths, plan, bucket_width=8))
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
    from seqvae.tokenizers import SmilesTokenizer

    tokenizer = SmilesTokenizer()
    texts = data.read_sequences("moses:train").texts
    lengths = np.fromiter((len(tokenizer.tokenize(t)) + 1 for t in texts), np.int32, len(texts))
    max_len = int(lengths.max())
    results = {}
    for batch_size in (128, 512):
        for bucket in (True, False):
            plan = data.batch_plan(lengths, batch_size, seed=0, epoch=0, bucket=bucket)
            for width in (8, 1):
                results[batch_size, bucket, width] = data.padding_fraction(lengths, plan, width, max_len)
    print(f"\nMOSES train: {len(texts)} sequences, max_len {max_len}, mean length {lengths.mean():.2f}")
    for (batch_size, bucket, width), value in results.items():
        print(f"  batch {batch_size} {'bucketed' if bucket else 'shuffled'} bucket_width {width}: "
              f"padding {100 * value:.2f}%")
    for batch_size in (128, 512):
        assert results[batch_size, True, 8] < results[batch_size, False, 8] / 2
