"""The MOSES splits inside the molsets wheel: one loader, found without importing moses."""

import sys

import pytest

from seqvae.data import moses
from seqvae.data.sources import read_sequences
from seqvae.errors import SeqvaeError


def test_read_a_moses_split():
    seqs = read_sequences("moses:test_scaffolds")
    assert len(seqs.texts) == 176225 and seqs.source == "moses:test_scaffolds"
    assert seqs.line_numbers[0] == 2  # line 1 is the header
    assert "moses" not in sys.modules or sys.modules["moses"] is None  # never imported


def test_unknown_split_and_missing_package(monkeypatch):
    with pytest.raises(SeqvaeError, match="unknown MOSES split 'valid'"):
        moses.moses_split_file("valid")
    monkeypatch.setattr(moses, "moses_package_dir",
                        lambda: (_ for _ in ()).throw(SeqvaeError(f"not installed; {moses.MOSES_HINT}")))
    with pytest.raises(SeqvaeError, match="pip install --no-deps molsets==0.3.1"):
        read_sequences("moses:test")


def test_the_fast_split_reader_equals_the_csv_reader():
    """``read_split`` reads the split as plain lines; the general CSV reader gives the same
    texts and line numbers."""
    from seqvae.data import sources

    fast = read_sequences("moses:test")
    slow = sources._read_table(moses.moses_split_file("test"), "SMILES", 0, delimiter=",")
    assert fast.texts == slow.texts and fast.line_numbers == slow.line_numbers
    assert read_sequences("moses:test", limit=3).texts == slow.texts[:3]


def test_a_file_that_is_not_a_moses_split_is_one_line(tmp_path, monkeypatch):
    import gzip

    path = tmp_path / "train.csv.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("ID,SMILES\n1,CCO\n")
    monkeypatch.setattr(moses, "moses_split_file", lambda split: str(path))
    with pytest.raises(SeqvaeError, match=r"train.csv.gz:1: not a MOSES split"):
        moses.read_split("train")
