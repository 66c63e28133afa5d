"""encode_texts / prepare_data: the one path from texts to ids."""

import numpy as np
import pytest

from seqvae.config import DataConfig
from seqvae.data.preparation import (TextCodec, encode_texts, ids_to_texts, invalid_smiles_rows,
                                     is_selfies, prepare_data, to_model_notation)
from seqvae.data.tokenizers import SelfiesTokenizer
from seqvae.data.vocabulary import EOS_ID, PAD_ID, UNK_ID, Vocabulary
from seqvae.errors import SeqvaeError


def smiles_codec(max_len=9):
    return TextCodec(Vocabulary(["C", "Cl", "c", "1", "O", "(", ")", "="]), "smiles", max_len)


def test_encode_texts_pads_and_ends_with_eos():
    codec = smiles_codec()
    encoded = encode_texts(codec, ["CCl", "c1ccccc1", "O"])
    vocab = codec.vocab
    assert encoded.ids.shape == (3, 9) and encoded.ids.dtype == np.int32
    assert encoded.ids[0].tolist() == vocab.encode(["C", "Cl"]) + [PAD_ID] * 6
    assert encoded.ids[2].tolist() == [vocab.encode(["O"], add_eos=False)[0], EOS_ID] + [PAD_ID] * 7
    assert encoded.lengths.tolist() == [3, 9, 2]
    assert encoded.kept.tolist() == [0, 1, 2] and encoded.problems == []
    assert ids_to_texts(codec, encoded.ids) == ["CCl", "c1ccccc1", "O"]


def test_encode_texts_skip_lists_each_problem_with_its_line():
    codec = smiles_codec(max_len=4)
    texts = ["CC", "C1CC", "xyz(", "CCCCCCC", "N", "CO"]
    encoded = encode_texts(codec, texts, on_error="skip", source="f.smi",
                           line_numbers=[2, 3, 4, 5, 6, 7])
    assert encoded.kept.tolist() == [0, 5] and encoded.texts == ["CC", "CO"]
    kinds = {row: kind for row, kind, _ in encoded.problems}
    assert kinds == {1: "invalid", 2: "invalid", 3: "too_long", 4: "unknown_token"}
    assert encoded.messages[0].startswith("f.smi:3: invalid SMILES")
    assert encoded.messages[2] == "f.smi:5: 8 tokens with <eos>, longer than the model's maximum of 4"
    assert encoded.messages[3] == "f.smi:6: token 'N' is not in the run's vocabulary"


def test_encode_texts_raise_and_skip_invalid():
    codec = smiles_codec()
    with pytest.raises(SeqvaeError, match=r"^input:2: token 'N' is not in the run's vocabulary"):
        encode_texts(codec, ["CC", "N"])
    encoded = encode_texts(codec, ["CC", "C1CC"], on_error="skip_invalid")
    assert encoded.kept.tolist() == [0] and len(encoded.problems) == 1
    with pytest.raises(SeqvaeError, match="not in the run's vocabulary"):
        encode_texts(codec, ["C1CC", "N"], on_error="skip_invalid")


def test_smiles_runs_check_bracket_smiles_too():
    """A SMILES run checks text starting with '[' as SMILES (only SELFIES runs treat it apart)."""
    codec = TextCodec(Vocabulary(["[Na+]", ".", "[Cl-]", "[Xx]"]), "smiles", 8)
    encoded = encode_texts(codec, ["[Na+].[Cl-]", "[Xx]"], on_error="skip")
    assert encoded.kept.tolist() == [0]


def test_selfies_runs_take_smiles_and_selfies_and_give_smiles():
    selfies = SelfiesTokenizer.from_smiles("CCO")
    assert to_model_notation("CCO", "selfies") == selfies == to_model_notation(selfies, "selfies")
    assert to_model_notation("CCO", "smiles") == "CCO"
    tokens = SelfiesTokenizer().tokenize(selfies)
    codec = TextCodec(Vocabulary(sorted(set(tokens))), "selfies", 6)
    encoded = encode_texts(codec, ["CCO", selfies])
    assert (encoded.ids[0] == encoded.ids[1]).all()
    assert ids_to_texts(codec, encoded.ids) == ["CCO", "CCO"]
    assert encoded.texts == ["CCO", selfies]  # the texts as given


def test_unknown_token_decodes_as_unk_and_empty_rows():
    codec = smiles_codec()
    ids = np.array([[UNK_ID, EOS_ID, 0], [EOS_ID, 0, 0]])
    assert ids_to_texts(codec, ids) == ["<unk>", ""]


def test_prepare_data_reuses_a_stored_codec_and_names_lines(tmp_path):
    path = tmp_path / "data.smi"
    path.write_text("CCO\nC1CC\nCCN\n")
    fitted = prepare_data(DataConfig(validation_fraction=0.0), str(path))
    assert fitted.skipped == 1 and fitted.texts == ["CCO", "CCN"]
    assert fitted.max_len == 4 and "N" in fitted.vocab
    other = tmp_path / "other.smi"
    other.write_text("CCO\nCCS\n")
    with pytest.raises(SeqvaeError, match=r"other.smi:2: token 'S' is not in the run's vocabulary"):
        prepare_data(DataConfig(), str(other), codec=fitted.codec)


def test_kekulize_runs_model_kekule_smiles_and_read_aromatic_input(tmp_path):
    path = tmp_path / "data.smi"
    path.write_text("c1ccccc1O\nCCO\nc1cc[nH]c1\n")
    prepared = prepare_data(DataConfig(validation_fraction=0.0, kekulize=True), str(path))
    assert prepared.codec.kekulize
    assert not any(token in prepared.vocab for token in ("c", "[nH]", "n"))
    assert "=" in prepared.vocab and "[nH]" not in prepared.vocab
    encoded = encode_texts(prepared.codec, ["Oc1ccccc1"])  # aromatic input, another spelling
    from seqvae.data.chemistry import canonical_smiles

    back = ids_to_texts(prepared.codec, encoded.ids)[0]
    assert "=" in back and canonical_smiles(back) == canonical_smiles("Oc1ccccc1")
    assert to_model_notation("CCO", "smiles", kekulize=True) == "CCO"


def test_kekulize_skips_invalid_lines_with_their_line_numbers(tmp_path, capsys):
    path = tmp_path / "data.smi"
    path.write_text("c1ccccc1O\nC1CC\nc1cc[nH]c1\nc1cccc1\n")  # unclosed ring; no Kekule form
    prepared = prepare_data(DataConfig(validation_fraction=0.0, kekulize=True), str(path))
    assert prepared.skipped == 2 and prepared.line_numbers == [1, 3]
    assert "skipped 2 invalid SMILES" in capsys.readouterr().err
    with pytest.raises(SeqvaeError, match=r"data.smi:2: invalid SMILES 'C1CC'"):
        prepare_data(DataConfig(kekulize=True), str(path), strict=True)


def test_kekulize_acts_on_loaded_smiles_runs_only():
    assert DataConfig(kekulize=True).kekule
    assert not DataConfig(tokenizer="selfies", kekulize=True).kekule
    assert not DataConfig(tokenizer="char", kekulize=True).kekule
    assert not DataConfig(kekulize=True, streaming=True).kekule
    prepared = prepare_data(DataConfig(tokenizer="char", kekulize=True, validation_fraction=0.0),
                            ["c1ccccc1", "CCO"])
    assert not prepared.codec.kekulize and "c" in prepared.vocab


@pytest.mark.parametrize("tokenizer,kekulize,whole_split", [
    ("smiles", False, True), ("smiles", True, False), ("selfies", False, False)])
def test_moses_subsets_fit_the_whole_split_only_when_tokenizing_is_cheap(
        monkeypatch, tokenizer, kekulize, whole_split):
    from seqvae.data import sources

    read = []
    original = sources.read_sequences

    def recording(source, column="SMILES", limit=0):
        read.append((source, limit))
        return original(source, column, limit or 200)  # the "whole split": 200 lines, fast

    monkeypatch.setattr(sources, "read_sequences", recording)
    config = DataConfig(tokenizer=tokenizer, kekulize=kekulize, limit=50, validation_fraction=0.0)
    prepared = prepare_data(config, "moses:train")
    assert (("moses:train", 0) in read) == whole_split
    assert len(prepared.ids) == 50


def test_smiles_that_start_with_a_bracket_atom_are_not_taken_for_selfies():
    # MOSES train line 7976: a SELFIES run once refused it as "not a SELFIES string"
    smiles = "[H]N=c1c(C#N)c(C)c(C(=O)OCC)nn1-c1ccc(C)cc1"
    assert not is_selfies(smiles) and is_selfies("[C][=O]") and not is_selfies("")
    assert to_model_notation(smiles, "selfies") == SelfiesTokenizer.from_smiles(smiles)
    assert invalid_smiles_rows([smiles, "[C][C]", "[H]C1"], "selfies") == [2]


def test_selfies_runs_convert_each_molecule_once(monkeypatch, tmp_path):
    from seqvae.data import tokenizers

    calls = []
    original = tokenizers.SelfiesTokenizer.from_smiles
    monkeypatch.setattr(tokenizers.SelfiesTokenizer, "from_smiles",
                        staticmethod(lambda smiles: calls.append(smiles) or original(smiles)))
    path = tmp_path / "data.smi"
    path.write_text("CCO\nc1ccccc1\nC1CC\nCC(=O)N\n")  # line 3 is invalid: skipped, not converted
    prepared = prepare_data(DataConfig(tokenizer="selfies", validation_fraction=0.0), str(path))
    assert sorted(calls) == sorted(["CCO", "c1ccccc1", "CC(=O)N"])
    assert prepared.line_numbers == [1, 2, 4] and prepared.texts[1] == "c1ccccc1"
    from seqvae.data.chemistry import canonical_smiles

    back = ids_to_texts(prepared.codec, prepared.ids)  # decoded to SMILES
    assert [canonical_smiles(text) for text in back] == ["CCO", "c1ccccc1", "CC(N)=O"]


def test_limit_takes_the_first_lines_or_a_seeded_random_draw():
    smiles = ["C" * n + "O" for n in range(1, 41)]
    first = prepare_data(DataConfig(limit=10, validation_fraction=0.0), smiles)
    assert first.line_numbers == list(range(1, 11))
    drawn = prepare_data(DataConfig(limit=10, subset="random", validation_fraction=0.0), smiles,
                         seed=2)
    assert len(drawn.line_numbers) == 10 and drawn.line_numbers == sorted(drawn.line_numbers)
    assert drawn.line_numbers != first.line_numbers and max(drawn.line_numbers) > 10
    again = prepare_data(DataConfig(limit=10, subset="random", validation_fraction=0.0), smiles,
                         seed=2)
    assert again.line_numbers == drawn.line_numbers  # a resumed run reads the same molecules
    with pytest.raises(SeqvaeError, match="data.subset"):
        DataConfig(subset="last")


@pytest.mark.slow
def test_preparation_checks_molecules_on_every_core_with_progress(monkeypatch, capsys):
    """Kekule conversion and the SMILES check run on worker processes for many molecules, with
    a progress line (count, rate, time left) per chunk, and give what one process gives."""
    from seqvae import parallel
    from seqvae.config import DataConfig
    from seqvae.data import preparation

    texts = ["c1ccccc1O", "CCO", "C1=CC=CC=C1N", "bogus(", "CC(=O)Nc1ccc(O)cc1"] * 120
    config = DataConfig(kekulize=True, validation_fraction=0.0)
    alone = preparation.prepare_data(config, texts)
    monkeypatch.setattr(preparation, "PARALLEL_MIN", 100)
    monkeypatch.setattr(parallel, "worker_count", lambda: 2)
    capsys.readouterr()
    spread = preparation.prepare_data(config, texts)
    err = capsys.readouterr().err
    assert spread.texts == alone.texts and np.array_equal(spread.ids, alone.ids)
    assert "preparing the data: Kekule SMILES: 600/600 molecules (2 processes, " in err
    aromatic = preparation.prepare_data(DataConfig(validation_fraction=0.0), texts)
    assert "preparing the data: checking SMILES: 600/600 molecules (2 processes, " in (
        capsys.readouterr().err)
    assert aromatic.skipped == 120
