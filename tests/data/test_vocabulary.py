"""The vocabulary: special ids first, deterministic order, encode/decode, atomic save."""

import json
import os
import random

import numpy as np
import pytest

from seqvae.data.vocabulary import BOS, EOS, PAD, UNK, UnknownTokenError, Vocabulary
from seqvae.errors import SeqvaeError

DATA = [["C", "C", "O"], ["c", "1", "c", "c", "1"], ["C", "Cl"], ["O", "N"]]


def test_vocabulary_specials_first_then_by_count_then_by_string():
    vocab = Vocabulary.fit(DATA)
    assert vocab.tokens == [PAD, BOS, EOS, UNK, "C", "c", "1", "O", "Cl", "N"]
    assert len(vocab) == 10
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2, 3)


def test_vocabulary_ids_do_not_depend_on_data_order():
    shuffled = [list(reversed(tokens)) for tokens in reversed(DATA)]
    random.Random(0).shuffle(shuffled)
    assert Vocabulary.fit(shuffled) == Vocabulary.fit(DATA)


def test_vocabulary_min_count_and_specials_in_data():
    vocab = Vocabulary.fit(DATA + [[EOS, PAD]], min_count=2)
    assert vocab.tokens == [PAD, BOS, EOS, UNK, "C", "c", "1", "O"]
    with pytest.raises(SeqvaeError, match="min_count"):
        Vocabulary.fit(DATA, min_count=0)


def test_vocabulary_rejects_repeated_and_special_tokens():
    with pytest.raises(SeqvaeError, match="repeated"):
        Vocabulary(["a", "b", "a"])
    with pytest.raises(SeqvaeError, match="special"):
        Vocabulary(["a", UNK])


def test_encode_decode_with_eos_and_pad():
    vocab = Vocabulary(["C", "O"])
    assert vocab.encode(["C", "O", "C"]) == [4, 5, 4, 2]
    assert vocab.encode(["C"], add_eos=False) == [4]
    assert vocab.decode([1, 4, 5, 0, 4, 2, 5, 5]) == ["C", "O", "C"]
    assert vocab.decode(np.array([4, 5, 2, 0, 0], dtype=np.int32)) == ["C", "O"]
    assert vocab.decode(np.array([4, 5], dtype=np.int64)) == ["C", "O"]  # no eos: read to end
    with pytest.raises(ValueError, match="outside"):
        vocab.decode([4, 6])
    with pytest.raises(ValueError, match="outside"):
        vocab.decode([-1])


def test_unknown_tokens():
    vocab = Vocabulary(["C", "O"])
    assert vocab.encode(["C", "N", "O"]) == [4, 3, 5, 2]
    assert vocab.decode([4, 3, 5]) == ["C", UNK, "O"]
    with pytest.raises(UnknownTokenError) as error:
        vocab.encode(["C", "N"], unknown="error")
    assert error.value.token == "N"
    assert isinstance(error.value, KeyError) and isinstance(error.value, SeqvaeError)
    assert str(error.value) == "token 'N' is not in the vocabulary"
    with pytest.raises(ValueError):
        vocab.encode(["C"], unknown="skip")


def test_vocabulary_save_load(tmp_path):
    vocab = Vocabulary.fit(DATA + [["ü", "[nH]", '"']])
    path = tmp_path / "run" / "vocab.json"
    vocab.save(path)
    assert Vocabulary.load(path) == vocab
    assert Vocabulary.from_dict(json.loads(path.read_text(encoding="utf-8"))) == vocab
    assert Vocabulary.load(str(path)) != Vocabulary(["C"])
    vocab.save(path)  # overwriting leaves no temporary files behind
    assert os.listdir(path.parent) == ["vocab.json"]


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "not found"),
        ('{"tokens": ["a",', "line 1: not valid JSON"),
        ('["a"]', "JSON object"),
        ('{"tokens": ["a", "a"]}', "repeated"),
        ('{"special_tokens": ["<s>"], "tokens": []}', "special tokens"),
    ],
)
def test_vocabulary_load_errors_name_the_file(tmp_path, content, message):
    path = tmp_path / "vocab.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(SeqvaeError, match=message) as error:
        Vocabulary.load(path)
    assert str(error.value).startswith(str(path))
    assert "\n" not in str(error.value)
