"""Tests for seqvae.data: every source format, one-line errors, splits and bucketed batches."""

import csv
import gzip
import importlib.util
import io

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

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
    path.write_text("id,structure\n1,CCO\n")
    message = error_of(path)
    assert message.startswith(f"{path}:1: no column 'SMILES'") and "id, structure" in message


def test_a_column_named_in_another_case_is_found_when_only_one_is(tmp_path):
    path = tmp_path / "drugs.csv"
    path.write_text("name,smiles\naspirin,CC(=O)Oc1ccccc1C(=O)O\n")
    assert sources.read_sequences(str(path), "SMILES").texts == ["CC(=O)Oc1ccccc1C(=O)O"]
    ambiguous = tmp_path / "two.csv"
    ambiguous.write_text("smiles,Smiles\nCC,CO\n")
    assert error_of(ambiguous).startswith(f"{ambiguous}:1: no column 'SMILES'")


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


# --- hostile files: every reader gives sequences or one line, never a traceback ----------------
#
# Each target is fuzzed by hypothesis (see FUZZ for the count of cases). Where a file has an
# obvious meaning (text lines, CSV cells, one-hot rows), the texts read must equal what was
# written; anything else must be refused in one line naming the file. The streaming readers that
# `seqvae encode` uses (count_records, iter_sequences) must agree with read_sequences.

FUZZ = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def _one_line_naming(error: SeqvaeError, name: str) -> None:
    message = str(error)
    assert message and "\n" not in message and name in message, message


def _read_or_refuse(path, column: str = "SMILES"):
    """read_sequences(path): Sequences of strings, or a SeqvaeError of one line naming the file;
    iter_sequences and count_records give the same texts (or also refuse in one line)."""
    try:
        sequences = sources.read_sequences(str(path), column=column)
    except SeqvaeError as error:
        _one_line_naming(error, str(path))
        sequences = None
    try:  # only counts lines: it may pass a file the readers refuse, never raise otherwise
        count = sources.count_records(str(path), column=column)
    except SeqvaeError as error:
        _one_line_naming(error, str(path))
        count = None
    try:
        chunks = list(sources.iter_sequences(str(path), column=column, chunk_size=3))
    except SeqvaeError as error:
        _one_line_naming(error, str(path))
        assert sequences is None, f"read_sequences read {path}, iter_sequences refused it"
        return None
    if sequences is None:  # iter_sequences saw no problem: there must be none to see
        pytest.fail(f"iter_sequences read {path}, read_sequences refused it")
    assert sequences.texts and all(isinstance(t, str) for t in sequences.texts)
    if not str(path).endswith(".npy"):  # an array's all-padding row keeps its place as ""
        assert all(sequences.texts)
    assert len(sequences.line_numbers) == len(sequences.texts)
    assert [t for c in chunks for t in c.texts] == sequences.texts
    assert [n for c in chunks for n in c.line_numbers] == sequences.line_numbers
    assert count is not None and count >= len(sequences.texts)
    return sequences


@FUZZ
@given(content=st.binary(max_size=400),
       suffix=st.sampled_from([".smi", ".txt", ".csv", ".tsv", ".npy", ".smi.gz", ".csv.gz"]))
def test_random_bytes_in_any_format(tmp_path, content, suffix):
    path = tmp_path / f"data{suffix}"
    path.write_bytes(content)
    _read_or_refuse(path)


# Text lines: atoms, brackets, '#' comments, spaces and tabs, and letters beyond ASCII.
LINE = st.text(alphabet="CNOc1()=[]#@+ \t\u00e9\u03a9\u4e2d", max_size=12)


@FUZZ
@given(lines=st.lists(LINE, max_size=12), ending=st.sampled_from(["\n", "\r\n"]),
       gzipped=st.booleans(), final_newline=st.booleans())
def test_smi_lines_come_back_as_their_first_field(tmp_path, lines, ending, gzipped, final_newline):
    text = ending.join(lines) + (ending if final_newline else "")
    path = tmp_path / ("mols.smi.gz" if gzipped else "mols.smi")
    path.write_bytes(gzip.compress(text.encode()) if gzipped else text.encode())
    expected = [(n, line.split()[0]) for n, line in enumerate(lines, start=1)
                if line.split() and not line.split()[0].startswith("#")]
    sequences = _read_or_refuse(path)
    if not expected:
        assert sequences is None
        return
    assert list(zip(sequences.line_numbers, sequences.texts)) == expected


# CSV cells: delimiters, quotes and line breaks inside quoted cells, spaces to strip.
CELL = st.text(alphabet="CNOc1()=,;\t\"' \n\u00e9#", max_size=8)


@FUZZ
@given(rows=st.lists(st.lists(CELL, max_size=4), max_size=8), position=st.integers(0, 3),
       delimiter=st.sampled_from([",", "\t"]), gzipped=st.booleans())
def test_csv_and_tsv_cells_come_back(tmp_path, rows, position, delimiter, gzipped):
    header = ["id", "name", "score"]
    header.insert(position, "SMILES")
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    writer.writerow(header)
    expected, line = [], 2
    for row in rows:
        if len(row) > position and row[position].strip():
            expected.append((line, row[position].strip()))
        start = out.tell()
        writer.writerow(row)
        line += out.getvalue()[start:].count("\n")  # a quoted cell may hold line breaks
    name = "table" + (".csv" if delimiter == "," else ".tsv") + (".gz" if gzipped else "")
    path = tmp_path / name
    data = out.getvalue().encode()
    path.write_bytes(gzip.compress(data) if gzipped else data)
    sequences = _read_or_refuse(path)
    if not expected:
        assert sequences is None
        return
    assert list(zip(sequences.line_numbers, sequences.texts)) == expected


@FUZZ
@given(header=st.lists(st.sampled_from(["SMILES", "smiles", "id", "", "SMILES "]), max_size=4),
       rows=st.lists(st.lists(st.text(alphabet="CNO()=1c\"', \t;x", max_size=6), max_size=5),
                     max_size=6),
       delimiter=st.sampled_from([",", "\t"]),
       column=st.sampled_from(["SMILES", "id"]) | st.text(max_size=5))
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


@st.composite
def _class_ids(draw):
    """``(ids (N, T) in [-1, C), C)``: class ids with -1 for padding."""
    classes = draw(st.integers(1, 6))
    ids = draw(hnp.arrays(np.int64, hnp.array_shapes(min_dims=2, max_dims=2, max_side=5),
                          elements=st.integers(-1, classes - 1)))
    return ids, classes


def _ids_as_texts(ids) -> list[str]:
    return [" ".join(str(c) for c in row if c >= 0) for row in ids]


@FUZZ
@given(drawn=_class_ids(), dtype=st.sampled_from([bool, np.uint8, np.int32, np.float16,
                                                   np.float32, np.float64]))
def test_one_hot_npy_comes_back_as_its_class_ids(tmp_path, drawn, dtype):
    ids, classes = drawn
    one_hot = (ids[..., None] == np.arange(classes)).astype(dtype)  # -1 rows are all zero
    path = tmp_path / "one_hot.npy"
    np.save(path, one_hot)
    sequences = _read_or_refuse(path)
    if not (ids >= 0).any():
        assert sequences is None
        return
    assert sequences.texts == _ids_as_texts(ids) and sequences.one_hot_classes == classes
    class_ids = tmp_path / "ids.npy"  # the same data as (N, T) class ids
    np.save(class_ids, ids)
    assert _read_or_refuse(class_ids).texts == _ids_as_texts(ids)


@FUZZ
@given(drawn=_class_ids(), value=st.sampled_from([0.5, 2.0, -1.0, np.nan, np.inf]),
       where=st.tuples(st.integers(0), st.integers(0), st.integers(0)), second_one=st.booleans())
def test_one_hot_npy_with_one_wrong_value_is_refused(tmp_path, drawn, value, where, second_one):
    ids, classes = drawn
    one_hot = (ids[..., None] == np.arange(classes)).astype(np.float32)
    assume(one_hot.size > 0)
    n, t, c = (i % s for i, s in zip(where, one_hot.shape))
    if second_one:  # a second 1 in a row that has one already
        assume(classes > 1 and ids[n, t] >= 0)
        one_hot[n, t, (ids[n, t] + 1) % classes] = 1.0
    else:
        one_hot[n, t, c] = value
    path = tmp_path / "bad.npy"
    np.save(path, one_hot)
    with pytest.raises(SeqvaeError, match="must be one-hot") as caught:
        sources.read_sequences(str(path))
    _one_line_naming(caught.value, str(path))


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


@FUZZ
@given(split=st.text(max_size=20) | st.sampled_from(
    ["train", "test", "test_scaffolds", "TRAIN", "train ", "test\n", "../train", "/etc/passwd",
     "train.csv.gz", "x" * 5000]))
def test_any_moses_split_name(split):
    source = f"moses:{split}"
    if split in moses.MOSES_SPLITS:
        if HAS_MOSES:
            assert len(sources.read_sequences(source, limit=3).texts) == 3
        return
    for read in (lambda: sources.read_sequences(source, limit=3),
                 lambda: next(sources.iter_sequences(source, chunk_size=3)),
                 lambda: sources.count_records(source)):
        with pytest.raises(SeqvaeError, match="unknown MOSES split") as caught:
            read()
        message = str(caught.value)
        assert "\n" not in message and len(message) < 200, message


def test_random_subset_draws_without_replacement_in_file_order():
    seqs = sources.Sequences([f"C{i}" for i in range(100)], list(range(3, 103)), "x.smi")
    drawn = sources.random_subset(seqs, 30, seed=4)
    rows = [int(text[1:]) for text in drawn.texts]
    assert len(rows) == len(set(rows)) == 30 and rows == sorted(rows)
    assert drawn.line_numbers == [row + 3 for row in rows] and drawn.source == "x.smi"
    assert rows != list(range(30))  # not the first lines
    assert sources.random_subset(seqs, 30, seed=4).texts == drawn.texts
    assert sources.random_subset(seqs, 30, seed=5).texts != drawn.texts
    assert sources.random_subset(seqs, 100, seed=4) is seqs and sources.random_subset(seqs, 500, 4) is seqs
