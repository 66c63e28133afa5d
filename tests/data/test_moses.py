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
