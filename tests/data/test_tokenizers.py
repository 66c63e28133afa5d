"""Tests for seqvae.tokenizers: exact tokens, exact round trips, deterministic vocabularies."""

import csv
import gzip
import importlib.util
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqvae.data.tokenizers import (SMILES_PATTERN, CharTokenizer, SelfiesTokenizer,
                                    SmilesTokenizer, Tokenizer, WordTokenizer, get_tokenizer)
from seqvae.errors import SeqvaeError

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

# --- batches -----------------------------------------------------------------------------------


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


# --- hostile text: every tokenizer round-trips or refuses in one line --------------------------


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(["smiles", "selfies", "char", "word"]),
       text=st.one_of(st.text(), st.text(alphabet="[]().=#CcNO1%\\/@+-H \t\n"),
                      st.binary(max_size=64).map(lambda b: b.decode("latin-1"))))
def test_every_tokenizer_round_trips_or_refuses_any_string(name, text):
    tokenizer = get_tokenizer(name)
    try:
        tokens = tokenizer.tokenize(text)
    except SeqvaeError as error:
        assert name == "selfies" and "\n" not in str(error)  # only SELFIES refuses text
        return
    assert all(isinstance(t, str) and t for t in tokens)
    expected = " ".join(text.split()) if name == "word" else text  # words: whitespace normalised
    assert tokenizer.detokenize(tokens) == expected
