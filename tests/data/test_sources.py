"""Tests for seqvae.data: every source format, one-line errors, splits and bucketed batches."""

import gzip
import importlib.util

import numpy as np
import pytest

from seqvae.data import moses, sources
from seqvae.errors import SeqvaeError

HAS_MOSES = importlib.util.find_spec("moses") is not None


def error_of(source, **kwargs) -> str:
    with pytest.raises(SeqvaeError) as info:
        sources.read_sequences(source, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- text files --------------------------------------------------------------------------------


def test_smi_skips_comments_and_blank_lines_and_takes_the_first_column(tmp_path):
    path = tmp_path / "mols.smi"
    path.write_text("# a comment\nCCO ethanol\n\n   \nc1ccccc1\tbenzene 3\n  # indented comment\nCl\n")
    seqs = sources.read_sequences(path)
    assert seqs.texts == ["CCO", "c1ccccc1", "Cl"]
    assert seqs.line_numbers == [2, 5, 7]
    assert seqs.source == str(path) and seqs.one_hot_classes == 0


def test_txt_and_crlf_and_limit(tmp_path):
    path = tmp_path / "mols.txt"
    path.write_bytes(b"CCO\r\nCCN\r\nCCC\r\n")
    assert sources.read_sequences(path).texts == ["CCO", "CCN", "CCC"]
    assert sources.read_sequences(path, limit=2).texts == ["CCO", "CCN"]


def test_csv_and_tsv_named_column(tmp_path):
    csv_path = tmp_path / "mols.csv"
    csv_path.write_text('id,smiles,name\n1,CCO,"ethanol, dry"\n2,,empty\n3, c1ccccc1 ,benzene\n')
    seqs = sources.read_sequences(csv_path, column="smiles")
    assert seqs.texts == ["CCO", "c1ccccc1"] and seqs.line_numbers == [2, 4]
    quoted = tmp_path / "quoted.csv"
    quoted.write_text('SMILES,note\nCCO,"two\nlines"\n\nCCN,x\n')
    assert sources.read_sequences(quoted).line_numbers == [2, 5]  # file lines, not record numbers
    tsv_path = tmp_path / "mols.tsv"
    tsv_path.write_text("SMILES\tscore\nCCO\t1\nCCN\t2\n")
    assert sources.read_sequences(tsv_path).texts == ["CCO", "CCN"]


def test_csv_with_byte_order_mark(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes("SMILES,x\nCCO,1\n".encode("utf-8-sig"))
    assert sources.read_sequences(path).texts == ["CCO"]


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
    assert sources.read_sequences(smi).texts == ["CCO", "CCN"]
    csv_path = tmp_path / "mols.csv.gz"
    with gzip.open(csv_path, "wt") as out:
        out.write("SMILES\nCCO\nc1ccccc1\n")
    assert sources.read_sequences(csv_path).texts == ["CCO", "c1ccccc1"]


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
    seqs = sources.read_sequences(path)
    assert seqs.texts == ["2 0 1", "1 1"] and seqs.one_hot_classes == 3
    assert sources.read_sequences(one_hot.astype(bool)).texts == ["2 0 1", "1 1"]


def test_class_id_npy_and_arrays(tmp_path):
    ids = np.array([[4, 0, 2, -1], [1, 1, 1, 1], [3, -1, -1, -1]], np.int64)
    path = tmp_path / "ids.npy"
    np.save(path, ids)
    seqs = sources.read_sequences(path, limit=2)
    assert seqs.texts == ["4 0 2", "1 1 1 1"] and seqs.one_hot_classes == 5
    assert sources.read_sequences(ids).source == "array"


def test_lists():
    seqs = sources.read_sequences(["CCO", "CCN"])
    assert seqs.texts == ["CCO", "CCN"] and seqs.line_numbers == [1, 2] and seqs.source == "list"
    assert sources.read_sequences(("a", "b", "c"), limit=1).texts == ["a"]
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


# --- streaming: iter_sequences and count_records -------------------------------------------------


@pytest.mark.parametrize("suffix", [".smi", ".csv", ".smi.gz"])
def test_iter_sequences_chunks_give_back_read_sequences(tmp_path, suffix):
    texts = [f"C{'C' * (i % 7)}O" for i in range(23)]
    path = tmp_path / f"mols{suffix}"
    if suffix == ".csv":
        body = "SMILES,name\n" + "".join(f"{t},m{i}\n" for i, t in enumerate(texts))
    else:
        body = "# header\n" + "".join(f"{t}\n\n" if i % 5 == 0 else f"{t}\n" for i, t in enumerate(texts))
    if suffix.endswith(".gz"):
        with gzip.open(path, "wt") as out:
            out.write(body)
    else:
        path.write_text(body)
    whole = sources.read_sequences(path)
    chunks = list(sources.iter_sequences(path, chunk_size=10))
    assert [len(c.texts) for c in chunks] == [10, 10, 3]
    assert [t for c in chunks for t in c.texts] == whole.texts == texts
    assert [n for c in chunks for n in c.line_numbers] == whole.line_numbers
    assert all(c.source == str(path) for c in chunks)


def test_iter_sequences_of_lists_and_arrays_slices_them():
    chunks = list(sources.iter_sequences(["CCO", "CCN", "CCC"], chunk_size=2))
    assert [c.texts for c in chunks] == [["CCO", "CCN"], ["CCC"]]
    assert [c.line_numbers for c in chunks] == [[1, 2], [3]]
    one_hot = np.eye(3, dtype=np.float32)[np.array([[0, 1, 2], [2, 1, 0]])]  # (2, 3, 3)
    chunks = list(sources.iter_sequences(one_hot, chunk_size=1))
    assert len(chunks) == 2 and all(c.one_hot_classes == 3 for c in chunks)


def test_iter_sequences_reads_as_it_is_consumed(tmp_path):
    # the bad byte sits past the first chunk: that chunk comes out before the error does
    path = tmp_path / "late.smi"
    path.write_bytes(b"CCO\n" * 20_000 + b"C\xffC\n")
    chunks = sources.iter_sequences(path, chunk_size=100)
    assert next(chunks).texts == ["CCO"] * 100
    with pytest.raises(SeqvaeError, match=r"late\.smi:20001: not UTF-8"):
        list(chunks)


def test_iter_sequences_errors_are_read_sequences_errors(tmp_path):
    comments = tmp_path / "comments.smi"
    comments.write_text("# only\n\n")
    table = tmp_path / "t.csv"
    table.write_text("SMILES,x\n,1\n")
    for path, fragment in ((comments, "no sequences found"), (table, "no sequences in column"),
                           (tmp_path / "nope.smi", "no such file")):
        with pytest.raises(SeqvaeError, match=fragment):
            list(sources.iter_sequences(path))
    with pytest.raises(ValueError):
        list(sources.iter_sequences(["CCO"], chunk_size=0))


def test_count_records_is_an_upper_bound_from_lines(tmp_path):
    path = tmp_path / "m.smi"
    path.write_text("# c\nCCO\n\nCCN")  # no final newline: the last line still counts
    assert sources.count_records(path) == 4 >= len(sources.read_sequences(path).texts)
    packed = tmp_path / "m.csv.gz"
    with gzip.open(packed, "wt") as out:
        out.write("SMILES\n" + "CCO\n" * 5)
    assert sources.count_records(packed) == 6
    assert sources.count_records(["CCO", "CCN"]) == 2


# --- MOSES -------------------------------------------------------------------------------------


@pytest.mark.skipif(not HAS_MOSES, reason="molsets is not installed")
def test_moses_train_resolves():
    seqs = sources.read_sequences("moses:train", limit=5)
    assert len(seqs.texts) == 5 and seqs.source == "moses:train"
    assert seqs.line_numbers == [2, 3, 4, 5, 6]
    assert moses.moses_split_file("test").endswith("test.csv.gz")


def test_moses_unknown_split():
    assert "unknown MOSES split 'bogus'" in error_of("moses:bogus")


# --- splits and batches ------------------------------------------------------------------------




# --- hostile files: every reader gives sequences or one line, never a traceback ----------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

FUZZ = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def _read_or_refuse(path, **kwargs):
    """read_sequences(path): Sequences of strings, or a SeqvaeError of one line naming the file."""
    try:
        sequences = sources.read_sequences(str(path), **kwargs)
    except SeqvaeError as error:
        message = str(error)
        assert "\n" not in message and str(path) in message, message
        return None
    assert sequences.texts and all(isinstance(t, str) for t in sequences.texts)
    assert len(sequences.line_numbers) == len(sequences.texts)
    return sequences


@FUZZ
@given(content=st.binary(max_size=400),
       suffix=st.sampled_from([".smi", ".txt", ".csv", ".tsv", ".npy", ".smi.gz", ".csv.gz"]))
def test_random_bytes_in_any_format(tmp_path, content, suffix):
    path = tmp_path / f"data{suffix}"
    path.write_bytes(content)
    _read_or_refuse(path)


CELL = st.text(alphabet="CNO()=1c\"', \t;x", max_size=6)


@FUZZ
@given(header=st.lists(st.sampled_from(["SMILES", "smiles", "id", "", "SMILES "]), max_size=4),
       rows=st.lists(st.lists(CELL, max_size=5), max_size=6),
       delimiter=st.sampled_from([",", "\t"]), column=st.sampled_from(["SMILES", "id"]))
def test_random_csv_and_tsv_shapes(tmp_path, header, rows, delimiter, column):
    suffix = ".csv" if delimiter == "," else ".tsv"
    lines = [delimiter.join(header)] + [delimiter.join(row) for row in rows]
    path = tmp_path / f"table{suffix}"
    path.write_text("\n".join(lines) + "\n")
    _read_or_refuse(path, column=column)


@FUZZ
@given(array=hnp.arrays(
    dtype=st.one_of(hnp.integer_dtypes(), hnp.unsigned_integer_dtypes(), hnp.floating_dtypes(),
                    hnp.boolean_dtypes(), hnp.complex_number_dtypes(),
                    hnp.unicode_string_dtypes(max_len=3), hnp.datetime64_dtypes()),
    shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)))
def test_random_npy_dtypes_and_shapes(tmp_path, array):
    path = tmp_path / "data.npy"
    np.save(path, array)
    _read_or_refuse(path)


@FUZZ
@given(lines=st.lists(st.text(alphabet="CNOc1()=#", min_size=1, max_size=30), min_size=1,
                      max_size=40),
       keep=st.floats(0.0, 0.99), suffix=st.sampled_from([".smi.gz", ".csv.gz"]))
def test_gzip_that_ends_early(tmp_path, lines, keep, suffix):
    text = ("SMILES\n" if suffix == ".csv.gz" else "") + "\n".join(lines) + "\n"
    whole = gzip.compress(text.encode())
    path = tmp_path / f"cut{suffix}"
    path.write_bytes(whole[:max(1, int(len(whole) * keep))])
    _read_or_refuse(path)
