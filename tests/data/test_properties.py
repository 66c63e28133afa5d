"""Properties against hand-checked RDKit values and JT-VAE's published penalized logP."""

import numpy as np
import pytest

from seqvae.data import properties
from seqvae.errors import SeqvaeError


# Values checked by hand against RDKit's own functions and the literature: Crippen logP of
# ethanol -0.0014 and benzene 1.6866 (Wildman & Crippen 1999 atom contributions), QED of aspirin
# 0.5501 (Bickerton et al. 2012 report 0.55), MW of aspirin C9H8O4 180.159.
@pytest.mark.parametrize("smiles, name, value", [
    ("CCO", "logp", -0.0014), ("c1ccccc1", "logp", 1.6866), ("CC(=O)Oc1ccccc1C(=O)O", "logp", 1.3101),
    ("CC(=O)Oc1ccccc1C(=O)O", "qed", 0.5501), ("CC(=O)Oc1ccccc1C(=O)O", "mw", 180.159),
    ("c1ccccc1", "sa", 1.0), ("CCO", "mw", 46.069),
])
def test_rdkit_properties_match_hand_checked_values(smiles, name, value):
    assert properties.rdkit_properties([smiles], [name])[0, 0] == pytest.approx(value, abs=1e-3)


# JT-VAE's data/zinc/opt.test.logP-SA (the 800 molecules of the constrained benchmark).
@pytest.mark.parametrize("smiles, published", [
    ("COc1cc2c(cc1OC)CC([NH3+])C2", -2.50504567445),
    ("OC[C@@H](Br)C(F)(F)Br", -2.45357941743),
    ("NC(=O)C1(N2CCCC2)CC[NH2+]CC1", -5.375513278),
])
def test_penalized_logp_matches_published_values(smiles, published):
    assert properties.penalized_logp(smiles) == pytest.approx(published, abs=1e-6)


def test_penalized_logp_terms_and_standardisation():
    # cyclooctane: logP 3.1208, SA 1, largest cycle 8 -> penalty 2
    assert properties.largest_cycle_penalty(properties.chemistry.to_mol("C1CCCCCCC1")) == 2
    assert properties.penalized_logp("C1CCCCCCC1") == pytest.approx(3.1208 - 1 - 2, abs=1e-3)
    s = properties.PLOGP_STANDARDISATION
    expected = ((3.1208 - s["logp"][0]) / s["logp"][1] + (-1 - s["sa"][0]) / s["sa"][1]
                + (-2 - s["cycle"][0]) / s["cycle"][1])
    assert properties.penalized_logp("C1CCCCCCC1", standardised=True) == pytest.approx(expected, abs=1e-3)


def test_invalid_molecules_give_nan_rows():
    values = properties.rdkit_properties(["CCO", "C1CC", "c1ccccc1"], ["logp", "qed"])
    assert np.isnan(values[1]).all() and not np.isnan(values[[0, 2]]).any()


def test_properties_on_every_core_equal_one_process(monkeypatch):
    from seqvae import parallel

    texts = ["CCO", "C1CC", "c1ccccc1", "CC(=O)Oc1ccccc1C(=O)O", "CCN"] * 120
    serial = properties.rdkit_properties(texts, ["logp", "qed", "plogp"])
    monkeypatch.setattr(properties, "_PARALLEL_MIN", 1)
    monkeypatch.setattr(parallel, "worker_count", lambda: 2)
    lines = []
    on_cores = properties.rdkit_properties(texts, ["logp", "qed", "plogp"], progress=lines.append)
    assert lines[-1].startswith("properties: 600/600 molecules (2 processes, ") and "s left)" in lines[-1]
    np.testing.assert_array_equal(serial, on_cores)
    assert properties.rdkit_properties([], ["logp", "qed"]).shape == (0, 2)


def test_parse_property_names():
    assert properties.parse_property_names("logp, qed,col:pIC50") == ("logp", "qed", "col:pIC50")
    for bad in ("logp,foo", "", "col:", "qed,qed"):
        with pytest.raises(SeqvaeError):
            properties.parse_property_names(bad)


def test_csv_columns_and_nan_note(tmp_path):
    path = tmp_path / "mols.csv"
    path.write_text("SMILES,pIC50\nCCO,5.5\n,7\nc1ccccc1,\nC1CC,6.0\n")
    table = properties.read_property_table(str(path), "logp,col:pIC50")
    assert table.texts == ["CCO", "c1ccccc1", "C1CC"]
    assert table.values[0].tolist() == pytest.approx([-0.0014, 5.5], abs=1e-3)
    assert np.isnan(table.values[1, 1]) and np.isnan(table.values[2, 0])
    assert table.nan_rows().tolist() == [False, True, True]
    assert "2 of 3 rows" in table.nan_note() and "lines 4, 5" in table.nan_note()


@pytest.mark.parametrize("text, names, message", [
    ("SMILES,pIC50\nCCO,abc\n", "col:pIC50", "mols.csv:2: column 'pIC50' holds 'abc', not a number"),
    ("SMILES,pIC50\nCCO,inf\n", "col:pIC50", "not a finite number"),
    ("SMILES,pIC50\nCCO,1\n", "col:Ki", "mols.csv:1: no column 'Ki'"),
])
def test_bad_property_columns_are_one_line_errors(tmp_path, text, names, message):
    path = tmp_path / "mols.csv"
    path.write_text(text)
    with pytest.raises(SeqvaeError, match=message) as error:
        properties.read_property_table(str(path), names)
    assert "\n" not in str(error.value)


def test_column_properties_need_a_table(tmp_path):
    path = tmp_path / "mols.smi"
    path.write_text("CCO\n")
    with pytest.raises(SeqvaeError, match="needs a .csv or .tsv"):
        properties.read_property_table(str(path), "col:pIC50")


def test_standardisation_ignores_nan_and_constant_columns():
    mean, std = properties.standardisation(np.array([[1.0, 2.0], [3.0, 2.0], [np.nan, 2.0]]))
    assert mean.tolist() == [2.0, 2.0] and std.tolist() == [1.0, 1.0]
