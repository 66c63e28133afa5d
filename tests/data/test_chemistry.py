"""RDKit helpers: parsing as MOSES does, canonical SMILES, properties."""


import pytest

from seqvae.data import chemistry
from seqvae.errors import SeqvaeError


def test_to_mol_follows_moses_get_mol():
    assert chemistry.to_mol("") is None
    assert chemistry.to_mol("C1CC") is None  # unclosed ring
    assert chemistry.to_mol("c1cccc1") is None  # cannot be kekulized
    mol = chemistry.to_mol("CCO")
    assert mol.GetNumAtoms() == 3
    assert chemistry.to_mol(mol) is mol


def test_canonical_smiles():
    assert chemistry.canonical_smiles("OCC") == "CCO"
    assert chemistry.canonical_smiles("C1=CC=CC=C1") == "c1ccccc1"
    assert chemistry.canonical_smiles("xx") is None
    assert chemistry.remove_invalid(["OCC", "xx", "C1=CC=CC=C1"]) == ["CCO", "c1ccccc1"]
    assert chemistry.remove_invalid(["OCC", "xx"], canonize=False) == ["OCC"]


def test_properties():
    # C2H6O: 2 * 12.011 + 6 * 1.008 + 15.999
    assert chemistry.molecular_weight("CCO") == pytest.approx(46.069, abs=1e-3)
    # Crippen contributions: CH3 0.1441, CH2-O -0.2035, OH -0.2893, 5 H on C 0.123, H on O -0.2677
    assert chemistry.logp("OCC") == pytest.approx(0.1441 - 0.2035 - 0.2893 + 5 * 0.123 - 0.2677)
    # published score of ZINC00000361 in RDKit's SA_Score/data/zim.100.txt
    assert chemistry.sa_score("CC(C(=O)[O-])c1ccc(-c2ccccc2)cc1") == pytest.approx(2.462, abs=1e-3)
    assert chemistry.qed("CC(=O)Oc1ccccc1C(=O)O") == pytest.approx(0.550, abs=1e-3)  # aspirin
    with pytest.raises(SeqvaeError, match="not a valid molecule"):
        chemistry.qed("C1CC")


def test_kekule_smiles():
    from seqvae.data.chemistry import canonical_smiles, kekule_smiles

    assert kekule_smiles("CCO") == "CCO"  # nothing aromatic: unchanged, RDKit not called
    assert kekule_smiles("ClC(Br)C") == "ClC(Br)C"
    kekule = kekule_smiles("c1ccc2[nH]ccc2c1")
    assert kekule is not None and not any(ch in kekule for ch in "cn") and "[nH]" not in kekule
    assert canonical_smiles(kekule) == canonical_smiles("c1ccc2[nH]ccc2c1")
    assert kekule_smiles("c1cccc1") is None  # does not kekulize
    assert kekule_smiles("not a smiles") is None


def test_checked_kekule_smiles_is_invalid_smiles_and_kekule_smiles_in_one_parse():
    from seqvae.data.chemistry import checked_kekule_smiles, invalid_smiles, kekule_smiles

    texts = ["CCO", "c1ccc2[nH]ccc2c1", "C1CC", "c1cccc1", "not a smiles", "Cc1ccncc1", ""]
    invalid, kekule = checked_kekule_smiles(texts)
    assert invalid == invalid_smiles(texts) == [2, 3, 4]
    assert kekule == [kekule_smiles(t) if i not in invalid else None for i, t in enumerate(texts)]
    assert kekule[0] == "CCO" and kekule[-1] == ""  # nothing aromatic: unchanged
