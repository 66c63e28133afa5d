"""Reading sequences from files, the bundled MOSES splits, Python lists and numpy arrays.

Sources: ``.smi``/``.txt`` (first whitespace-separated column), ``.csv``/``.tsv`` (a named
column), ``.npy`` one-hot ``(N, T, C)`` or class ids ``(N, T)`` (the classic example's format),
any of the text formats gzipped, the bundled MOSES splits (``moses:train``, ``moses:test``,
``moses:test_scaffolds``), Python lists of strings and numpy arrays.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from seqvae.data.moses import moses_split_file, read_split
from seqvae.errors import SeqvaeError


@dataclass(frozen=True)
class Sequences:
    """Texts read from a source; ``line_numbers[i]`` is the 1-based line of ``texts[i]``."""

    texts: list[str]
    line_numbers: list[int]
    source: str
    one_hot_classes: int = 0  # > 0 when read from a .npy array: texts are class ids "0 3 1"


def random_rows(size: int, count: int, seed: int) -> np.ndarray:
    """``count`` of the row indices ``0 .. size - 1`` drawn at random without replacement
    (seeded), sorted; all of them when ``count >= size``.

    For sources whose order is not random: MOSES's split files are not shuffled, and 10,000
    molecules drawn from the first 320,000 lines of its train split score FCD/Test 1.91 where
    10,000 drawn from all of it score 0.14.
    """
    if count >= size:
        return np.arange(size)
    return np.sort(np.random.default_rng(seed).choice(size, count, replace=False))


def random_subset(seqs: Sequences, count: int, seed: int) -> Sequences:
    """The ``random_rows`` of ``seqs`` (its line numbers kept), in their order."""
    if count >= len(seqs.texts):
        return seqs
    rows = random_rows(len(seqs.texts), count, seed)
    return Sequences([seqs.texts[i] for i in rows], [seqs.line_numbers[i] for i in rows],
                     seqs.source, seqs.one_hot_classes)


def is_array_source(source) -> bool:
    """Whether ``source`` is an array of class ids (a numpy array or a ``.npy`` file): data whose
    tokens are its classes, with no text to tokenize."""
    if isinstance(source, np.ndarray):
        return True
    if source is None or isinstance(source, (list, tuple)):
        return False
    name = os.fspath(source)
    return (name[:-3] if name.endswith(".gz") else name).endswith(".npy")


def read_sequences(source, column: str = "SMILES", limit: int = 0) -> Sequences:
    """Reads texts from a path, ``moses:SPLIT``, a list of strings or a numpy array.

    Args:
      source: see the module docstring.
      column: column name for ``.csv``/``.tsv`` files.
      limit: keep only the first ``limit`` sequences (0 = all).

    Raises:
      SeqvaeError: one line naming the file (and line) and the problem.
    """
    if isinstance(source, np.ndarray):
        return _from_array(source, "array", limit)
    if isinstance(source, (list, tuple)):
        texts = [str(t) for t in source][: limit or None]
        if not texts:
            raise SeqvaeError("the list of sequences is empty")
        return Sequences(texts, list(range(1, len(texts) + 1)), "list")
    source = os.fspath(source)
    if source.startswith("moses:"):
        texts, numbers = read_split(source.split(":", 1)[1])
        return Sequences(texts[: limit or None], numbers[: limit or None], source)
    _check_data_file(source)
    name = source[:-3] if source.endswith(".gz") else source
    if name.endswith(".npy"):
        try:
            array = np.load(source, allow_pickle=False)
        except (ValueError, OSError, EOFError) as error:
            raise SeqvaeError(f"{source}: not a readable .npy array ({str(error).splitlines()[0]})") from None
        if not isinstance(array, np.ndarray):  # np.load opens a .npz archive whatever its name
            array.close()
            raise SeqvaeError(f"{source}: is a .npz archive, expected a single .npy array")
        return _from_array(array, source, limit)
    if name.endswith((".csv", ".tsv")):
        return _read_table(source, column, limit, delimiter="\t" if name.endswith(".tsv") else ",")
    return _read_lines(source, limit)


def _open_text(path: str) -> io.TextIOBase:
    raw = gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")
    try:
        head = raw.read(8192)
    except (OSError, EOFError) as error:
        raw.close()
        raise SeqvaeError(f"{path}: cannot read ({error})") from None
    if b"\x00" in head:
        raw.close()
        raise SeqvaeError(f"{path}: looks like a binary file, expected text with one sequence per line")
    raw.seek(0)
    # utf-8-sig drops the byte-order mark that spreadsheet programs put before the header.
    return io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")


def _decode_error(path: str) -> SeqvaeError:
    """Names the first line that is not UTF-8.

    The text reader decodes 8 KiB chunks ahead of the line it returns, so the failing line is
    found by rereading the file as bytes (a UTF-8 sequence never contains a newline byte).
    """
    try:
        with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as raw:
            for number, line in enumerate(raw, start=1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError:
                    return SeqvaeError(f"{path}:{number}: not UTF-8 text "
                                       "(binary or wrongly encoded file)")
    except (OSError, EOFError):
        pass
    return SeqvaeError(f"{path}: not UTF-8 text (binary or wrongly encoded file)")


def _read_lines(path: str, limit: int) -> Sequences:
    texts, numbers = [], []
    for number, text in _line_records(path):
        texts.append(text)
        numbers.append(number)
        if limit and len(texts) >= limit:
            break
    if not texts:
        raise SeqvaeError(f"{path}: no sequences found (the file holds only blank or comment lines)")
    return Sequences(texts, numbers, path)


def _line_records(path: str) -> Iterator[tuple[int, str]]:
    """``(line number, first field)`` of each line that is not blank or a ``#`` comment."""
    with _open_text(path) as handle:
        try:
            for number, line in enumerate(handle, start=1):
                fields = line.split()
                if not fields or fields[0].startswith("#"):
                    continue
                yield number, fields[0]
        except UnicodeDecodeError:
            raise _decode_error(path) from None
        except (OSError, EOFError) as error:
            raise SeqvaeError(f"{path}: cannot read ({error})") from None


def _read_table(path: str, column: str, limit: int, delimiter: str) -> Sequences:
    texts, numbers = [], []
    for number, text in _table_records(path, column, delimiter):
        texts.append(text)
        numbers.append(number)
        if limit and len(texts) >= limit:
            break
    if not texts:
        raise SeqvaeError(f"{path}: no sequences in column {column!r}")
    return Sequences(texts, numbers, path)


def _table_records(path: str, column: str, delimiter: str) -> Iterator[tuple[int, str]]:
    """``(file line where the record starts, stripped value)`` of each non-empty ``column`` cell."""
    with _open_text(path) as handle:
        try:
            reader = csv.reader(handle, delimiter=delimiter)
            header = next(reader, None)
            if header is None:
                raise SeqvaeError(f"{path}: the file is empty")
            same = [h for h in header if h.strip().lower() == column.lower()]
            if column not in header and len(same) == 1:  # "smiles" for SMILES: no doubt which
                column = same[0]
            if column not in header:
                shown = ", ".join(h if h.isprintable() else repr(h) for h in header[:10])
                raise SeqvaeError(f"{path}:1: no column {column!r} in the header (columns: {shown}); "
                                  "choose one with data.column")
            index = header.index(column)
            start = reader.line_num + 1  # file line where the next record starts
            for row in reader:
                line, start = start, reader.line_num + 1  # a quoted field may span lines
                if len(row) <= index or not row[index].strip():
                    continue
                yield line, row[index].strip()
        except UnicodeDecodeError:
            raise _decode_error(path) from None
        except csv.Error as error:
            raise SeqvaeError(f"{path}:{reader.line_num}: malformed {('CSV', 'TSV')[delimiter == chr(9)]} ({error})") from None
        except (OSError, EOFError) as error:
            raise SeqvaeError(f"{path}: cannot read ({error})") from None


def _from_array(array: np.ndarray, source: str, limit: int) -> Sequences:
    """One-hot ``(N, T, C)`` (all-zero rows end a sequence) or class ids ``(N, T)`` -> texts."""
    if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
        raise SeqvaeError(f"{source}: expected a numeric array, got dtype {array.dtype}")
    if array.ndim == 3:
        if array.shape[0] == 0 or array.shape[2] == 0:
            raise SeqvaeError(f"{source}: empty one-hot array of shape {array.shape}")
        ones = array == 1  # compared in the array's own dtype: no cast overflows or drops a part
        if not np.all(ones | (array == 0)) or np.any(ones.sum(-1) > 1):
            raise SeqvaeError(f"{source}: a (N, T, C) array must be one-hot: each row all 0 or a single 1")
        classes, ids = array.shape[2], np.where(ones.any(-1), ones.argmax(-1), -1)
    elif array.ndim == 2:
        if not np.issubdtype(array.dtype, np.integer):
            raise SeqvaeError(f"{source}: a (N, T) array must hold integer class ids, got {array.dtype}")
        if array.size == 0 or array.min() < -1:
            raise SeqvaeError(f"{source}: class ids must be >= 0 (-1 marks padding)")
        ids, classes = array, int(array.max()) + 1
    else:
        raise SeqvaeError(f"{source}: expected shape (N, T, C) one-hot or (N, T) class ids, "
                          f"got {array.shape}")
    ids = ids[: limit or None]
    if not np.any(ids >= 0):
        raise SeqvaeError(f"{source}: the array holds no tokens (every position is padding)")
    texts = [" ".join(str(int(c)) for c in row if c >= 0) for row in ids]
    return Sequences(texts, list(range(1, len(texts) + 1)), source, one_hot_classes=classes)


def to_one_hot(texts: Sequence[str], classes: int, length: int) -> tuple[np.ndarray, int]:
    """Class-id texts (``"0 3 1"``, as read from an array) back into a one-hot array, all-zero
    rows after each sequence: the inverse of reading one.

    Returns:
      float32 ``(N, length, classes)``, and how many texts were longer than ``length`` and cut
      (a decoder that did not stop within the array's width).

    Raises:
      SeqvaeError: a text holding something other than class ids below ``classes``.
    """
    out, cut = np.zeros((len(texts), length, classes), np.float32), 0
    for row, text in enumerate(texts):
        words = text.split()
        if not all(w.isdigit() and int(w) < classes for w in words):
            raise SeqvaeError(f"sequence {row + 1} ({text[:40]!r}) is not class ids below {classes}")
        cut += len(words) > length
        words = words[:length]
        out[row, np.arange(len(words)), [int(w) for w in words]] = 1.0
    return out, cut


# --- streaming: sources too big to hold as one list ----------------------------------------------


def iter_sequences(source, column: str = "SMILES", chunk_size: int = 50_000) -> Iterator[Sequences]:
    """``read_sequences`` in chunks of at most ``chunk_size`` texts, in order.

    Text and table files and the MOSES splits are read as they are consumed, so memory holds one
    chunk whatever the file's size; lists and arrays (already in memory) are sliced.

    Raises:
      SeqvaeError: as ``read_sequences``, when the chunk holding the problem is reached.
    """
    if chunk_size < 1:
        raise ValueError("chunk_size must be at least 1")
    records = _records(source, column)
    if records is None:  # lists, arrays and .npy files
        whole = read_sequences(source, column)
        for start in range(0, len(whole.texts), chunk_size):
            yield Sequences(whole.texts[start:start + chunk_size],
                            whole.line_numbers[start:start + chunk_size], whole.source,
                            whole.one_hot_classes)
        return
    name, records = records
    texts, numbers, found = [], [], False
    for number, text in records:
        texts.append(text)
        numbers.append(number)
        if len(texts) == chunk_size:
            yield Sequences(texts, numbers, name)
            texts, numbers, found = [], [], True
    if texts:
        yield Sequences(texts, numbers, name)
    elif not found:
        read_sequences(source, column, limit=1)  # raises read_sequences' own message
        raise SeqvaeError(f"{name}: no sequences found")


def count_records(source, column: str = "SMILES") -> int:
    """An upper bound of the sequences in ``source`` (its lines), found by a fast pass over bytes;
    exact for lists and arrays."""
    records = _records(source, column)
    if records is None:
        return len(read_sequences(source, column).texts)
    path = moses_split_file(source.split(":", 1)[1]) if str(source).startswith("moses:") else (
        os.fspath(source))
    lines, last = 0, b"\n"
    try:
        with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as raw:
            for block in iter(lambda: raw.read(1 << 20), b""):
                lines += block.count(b"\n")
                last = block[-1:]
    except (OSError, EOFError) as error:  # gzip that ends early or is no gzip at all
        raise SeqvaeError(f"{path}: cannot read ({error})") from None
    return lines + (last != b"\n")


def _check_data_file(source: str) -> None:
    """One-line errors for a data path that is missing, a directory or empty."""
    if not os.path.exists(source):
        raise SeqvaeError(f"{source}: no such file")
    if os.path.isdir(source):
        raise SeqvaeError(f"{source}: is a directory, expected a data file")
    if os.path.getsize(source) == 0:
        raise SeqvaeError(f"{source}: the file is empty")


def _records(source, column: str) -> tuple[str, Iterator[tuple[int, str]]] | None:
    """(source name, ``(line, text)`` iterator) for sources that can be streamed, else None."""
    if isinstance(source, (np.ndarray, list, tuple)):
        return None
    source = os.fspath(source)
    if source.startswith("moses:"):
        return source, _table_records(moses_split_file(source.split(":", 1)[1]), "SMILES", ",")
    _check_data_file(source)
    name = source[:-3] if source.endswith(".gz") else source
    if name.endswith(".npy"):
        return None
    if name.endswith((".csv", ".tsv")):
        return source, _table_records(source, column, "\t" if name.endswith(".tsv") else ",")
    return source, _line_records(source)
