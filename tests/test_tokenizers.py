"""Tests for seqvae.tokenizers: exact tokens, exact round trips, deterministic vocabularies."""

import csv
import gzip
import importlib.util
import json
import os
import random
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqvae.errors import SeqvaeError
from seqvae.tokenizers import (
    BOS,
    EOS,
    PAD,
    SMILES_PATTERN,
    UNK,
    CharTokenizer,
    SelfiesTokenizer,
    SmilesTokenizer,
    Tokenizer,
    UnknownTokenError,
    Vocabulary,
    WordTokenizer,
    decode_batch,
    encode_batch,
    get_tokenizer,
)

# --- SMILES ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "smiles, tokens",
    [
        (
            "Cc1c(Cl)cccc1Br",
            ["C", "c", "1", "c", "(", "Cl", ")", "c", "c", "c", "c", "1", "Br"],
        ),
        (
            "CCCS(=O)c1ccc2[nH]c(=NC(=O)OC)[nH]c2c1",
            ["C", "C", "C", "S", "(", "=", "O", ")", "c", "1", "c", "c", "c", "2", "[nH]",
             "c", "(", "=", "N", "C", "(", "=", "O", ")", "O", "C", ")", "[nH]", "c", "2",
             "c", "1"],
        ),
        (
            "C[C@@H]1CC%10CC%12C#N.[Na+]/C=C\\O",
            ["C", "[C@@H]", "1", "C", "C", "%10", "C", "C", "%12", "C", "#", "N", ".",
             "[Na+]", "/", "C", "=", "C", "\\", "O"],
        ),
    ],
)
def test_smiles_tokens_are_atoms(smiles, tokens):
    tokenizer = SmilesTokenizer()
    assert tokenizer.tokenize(smiles) == tokens
    assert tokenizer.detokenize(tokens) == smiles


def test_smiles_characters_outside_the_regex_are_single_tokens():
    # "[" without "]", a space, a letter that is no atom, and a one-digit "%1".
    assert SmilesTokenizer().tokenize("C[ x%1é\n") == ["C", "[", " ", "x", "%", "1", "é", "\n"]


@given(st.text())
def test_smiles_round_trips_any_text(text):
    tokenizer = SmilesTokenizer()
    assert tokenizer.detokenize(tokenizer.tokenize(text)) == text


@given(st.text(alphabet="CcNnOoSBrlFI()[]=#@+-\\/%0123456789.H"))
def test_smiles_round_trips_smiles_like_text(text):
    tokenizer = SmilesTokenizer()
    assert tokenizer.detokenize(tokenizer.tokenize(text)) == text


# --- SELFIES -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "smiles", ["CCO", "c1ccccc1", "CC(=O)Oc1ccccc1C(=O)O", "C%10CCCCC%10.Cl", "C[C@@H](N)C(=O)O"]
)
def test_selfies_round_trip_from_smiles(smiles):
    tokenizer = SelfiesTokenizer()
    selfies_string = tokenizer.from_smiles(smiles)
    tokens = tokenizer.tokenize(selfies_string)
    assert all(token == "." or (token[0], token[-1]) == ("[", "]") for token in tokens)
    assert tokenizer.detokenize(tokens) == selfies_string
    # Compare canonical forms: SELFIES may write the same molecule differently.
    assert _canonical(tokenizer.to_smiles(selfies_string)) == _canonical(smiles)


def _canonical(smiles):
    Chem = pytest.importorskip("rdkit.Chem")
    return Chem.MolToSmiles(Chem.MolFromSmiles(smiles))


def test_selfies_tokens():
    assert SelfiesTokenizer().tokenize("[C][=O].[Na+1]") == ["[C]", "[=O]", ".", "[Na+1]"]
    assert SelfiesTokenizer().tokenize("") == []


@pytest.mark.parametrize("text", ["CCO", "[C]x[O]", "[C][O", "[C[O]]"])
def test_selfies_rejects_non_selfies_text(text):
    with pytest.raises(SeqvaeError, match="not a SELFIES string"):
        SelfiesTokenizer().tokenize(text)


def test_selfies_conversion_errors_are_one_line():
    with pytest.raises(SeqvaeError, match="cannot convert SMILES") as error:
        SelfiesTokenizer.from_smiles("C1CC(")
    assert "\n" not in str(error.value)
    with pytest.raises(SeqvaeError, match="cannot convert SELFIES") as error:
        SelfiesTokenizer.to_smiles("[C][Xx]")
    assert "\n" not in str(error.value)


# --- char and word -----------------------------------------------------------------------------


@given(st.text())
def test_char_round_trips_any_text(text):
    tokenizer = CharTokenizer()
    tokens = tokenizer.tokenize(text)
    assert len(tokens) == len(text)
    assert tokenizer.detokenize(tokens) == text


# str.split() also splits on control characters such as \x1f and \x85, so leave out category Cc.
WORDS = st.lists(st.text(st.characters(exclude_categories=("Zs", "Zl", "Zp", "Cc")), min_size=1))


@given(WORDS)
def test_word_round_trips_words(words):
    tokenizer = WordTokenizer()
    text = tokenizer.detokenize(words)
    assert tokenizer.tokenize(text) == words
    assert tokenizer.detokenize(tokenizer.tokenize(text)) == text


def test_word_tokenizer_normalizes_whitespace():
    tokenizer = WordTokenizer()
    assert tokenizer.tokenize("  the cat\tsat\n") == ["the", "cat", "sat"]
    assert tokenizer.detokenize(["the", "cat", "sat"]) == "the cat sat"


# --- get_tokenizer -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["smiles", "selfies", "char", "word"])
def test_get_tokenizer(name):
    tokenizer = get_tokenizer(name)
    assert tokenizer.name == name
    assert isinstance(tokenizer, Tokenizer)


def test_get_tokenizer_unknown_name_lists_the_valid_ones():
    with pytest.raises(SeqvaeError, match="'bpe'.*char, selfies, smiles, word"):
        get_tokenizer("bpe")


# --- Vocabulary --------------------------------------------------------------------------------

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


# --- batches -----------------------------------------------------------------------------------


def test_encode_batch_and_decode_batch():
    tokenizer = SmilesTokenizer()
    texts = ["CCl", "c1ccccc1", "", "CBr"]
    vocab = Vocabulary.fit(tokenizer.tokenize(t) for t in texts[:3])
    ids, lengths = encode_batch(vocab, tokenizer, texts, max_len=9)
    assert ids.shape == (4, 9) and ids.dtype == np.int32
    assert lengths.dtype == np.int32 and lengths.tolist() == [3, 9, 1, 3]
    assert ids[0].tolist() == vocab.encode(["C", "Cl"]) + [0] * 6
    assert ids[2].tolist() == [2] + [0] * 8
    assert ids[3].tolist() == [vocab.encode(["C"], add_eos=False)[0], 3, 2] + [0] * 6
    assert decode_batch(vocab, tokenizer, ids) == ["CCl", "c1ccccc1", "", "C<unk>"]


def test_encode_batch_names_the_first_long_line():
    tokenizer = CharTokenizer()
    vocab = Vocabulary(["a"])
    with pytest.raises(SeqvaeError, match=r"^line 2: 6 tokens with <eos>, more than max_len=5"):
        encode_batch(vocab, tokenizer, ["aaaa", "aaaaa", "aaaaaaaa"], max_len=5)
    ids, lengths = encode_batch(vocab, tokenizer, [], max_len=5)
    assert ids.shape == (0, 5) and lengths.shape == (0,)


# --- all of MOSES ------------------------------------------------------------------------------

# Every token of the 1,584,663 SMILES of the MOSES train split (no stereo, no charges).
MOSES_TRAIN_TOKENS = {
    "c", "C", "(", ")", "1", "O", "2", "N", "=", "n", "3", "F", "-", "S", "s", "o", "Cl",
    "[nH]", "#", "4", "Br", "5", "[H]", "6",
}


@pytest.mark.slow
def test_smiles_round_trips_all_of_moses_train():
    spec = importlib.util.find_spec("moses")  # locate molsets' data without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("molsets is not installed")
    path = os.path.join(spec.submodule_search_locations[0], "dataset", "data", "train.csv.gz")
    tokenizer = SmilesTokenizer()
    seen: set[str] = set()
    count = 0
    with gzip.open(path, "rt", encoding="ascii", newline="") as f:
        reader = csv.DictReader(f)
        for row in reader:
            smiles = row["SMILES"]
            tokens = tokenizer.tokenize(smiles)
            assert tokenizer.detokenize(tokens) == smiles, f"line {reader.line_num}"
            seen.update(tokens)
            count += 1
    assert count == 1_584_663
    assert seen == MOSES_TRAIN_TOKENS
    # None of them came from the single-character fallback.
    assert all(re.fullmatch(SMILES_PATTERN, token) for token in seen)
