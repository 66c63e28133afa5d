"""A user's molecules made writable by a run: salts, stereo, unknown tokens, length."""

from seqvae.data import adaptation, sources
from seqvae.data.preparation import TextCodec
from seqvae.data.vocabulary import Vocabulary

CODEC = TextCodec(Vocabulary(["C", "O", "N", "(", ")", "=", "1", "c", "Cl"]), "smiles", 12)


def _seqs(texts):
    return sources.Sequences(list(texts), list(range(2, len(texts) + 2)), "mine.smi")


def test_standardize_keeps_the_largest_fragment_and_drops_stereo_when_asked():
    assert adaptation.standardize("Cl.CCN", drop_stereo=False) == ("CCN", True, False)
    assert adaptation.standardize("[Na+].CC(=O)[O-]", drop_stereo=False)[0] == "CC(=O)[O-]"
    assert adaptation.standardize("C[C@H](O)N", drop_stereo=True) == ("CC(N)O", False, True)
    assert adaptation.standardize("C[C@H](O)N", drop_stereo=False)[0] == "C[C@@H](N)O"
    assert adaptation.standardize("not a molecule", drop_stereo=True) == (None, False, False)


def test_adapt_counts_each_kind_and_names_the_first_line():
    texts = ["CCO", "Cl.CCN", "C[C@H](O)N", "CCP", "CCCCCCCCCCCCCCCC", "xyz", "OCCN", "CC[N+](C)(C)C"]
    adapted = adaptation.adapt(_seqs(texts), CODEC)
    assert adapted.texts == ["CCO", "CCN", "CC(N)O", "NCCO"]
    assert adapted.line_numbers == [2, 3, 4, 8]
    assert (adapted.read, adapted.stripped, adapted.without_stereo) == (8, 1, 1)
    assert {kind: [line for line, _, _ in rows] for kind, rows in adapted.left_out.items()} == {
        "invalid": [7], "unknown_token": [5, 9], "too_long": [6]}
    assert adapted.missing_tokens == {"P": 1, "[N+]": 1}
    line = adaptation.describe(adapted)
    assert line.startswith("mine.smi: 8 molecules read, 4 kept; 1 cut to their largest fragment")
    assert "left out 2 with a token the run cannot write (first: line 5, token 'P'" in line
    assert "left out 1 longer than the run's max_len (first: line 6" in line
    assert "--extend-vocab adds them" in line


def test_a_vocabulary_that_writes_stereo_keeps_it():
    codec = TextCodec(Vocabulary(list(CODEC.vocab.tokens[4:]) + ["[C@H]", "[C@@H]"]), "smiles", 12)
    assert adaptation.writes_stereo(codec.vocab) and not adaptation.writes_stereo(CODEC.vocab)
    adapted = adaptation.adapt(_seqs(["C[C@H](O)N"]), codec)
    assert adapted.texts == ["C[C@@H](N)O"] and adapted.without_stereo == 0


def test_keep_salts_leaves_a_dotted_molecule_to_the_vocabulary():
    adapted = adaptation.adapt(_seqs(["Cl.CCN"]), CODEC, strip=False)
    assert adapted.texts == [] and "unknown_token" in adapted.left_out  # "." is not a token


def test_grown_codec_appends_tokens_by_count_and_grows_the_length():
    grown = adaptation.grown_codec(CODEC, ["CCP", "C[N+](C)(C)CP", "CCCCCCCCCCCCCCCCCC"])
    assert grown.vocab.tokens[:len(CODEC.vocab)] == CODEC.vocab.tokens
    assert grown.vocab.tokens[len(CODEC.vocab):] == ["P", "[N+]"]
    assert grown.max_len == 19 and grown.tokenizer == "smiles"
    assert adaptation.grown_codec(CODEC, ["CCCCCCCCCCCCCCCCCC"], max_len=15).max_len == 15
    assert adaptation.grown_codec(CODEC, ["CC"]).max_len == CODEC.max_len  # never shorter
