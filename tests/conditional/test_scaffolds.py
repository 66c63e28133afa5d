"""seqvae.conditional.scaffolds: reading scaffolds and writing the prefixes that decorate them."""

import numpy as np
import pytest
from rdkit import Chem

from seqvae import inference
from seqvae.conditional.scaffolds import (Decorations, attachment_points, parse_scaffold,
                                          rooted_smiles)
from seqvae.data.vocabulary import EOS_ID
from seqvae.errors import SeqvaeError


def test_smiles_smarts_and_errors():
    smiles = parse_scaffold(" c1ccncc1 ")
    assert not smiles.smarts and smiles.text == "c1ccncc1" and smiles.molecule is not None
    as_molecule = parse_scaffold("[#6]1:[#6]:[#6]:[#7]:[#6]:[#6]:1")  # a SMARTS, and a molecule
    assert as_molecule.smarts and as_molecule.molecule is not None
    assert as_molecule.contained_in(Chem.MolFromSmiles("Cc1ccncc1"))
    pattern = parse_scaffold("[#6;R2]")
    assert pattern.smarts and pattern.molecule is None
    assert pattern.contained_in(Chem.MolFromSmiles("c1ccc2ccccc2c1"))
    assert not pattern.contained_in(Chem.MolFromSmiles("c1ccccc1"))
    for bad, fragment in [("", "empty"), ("C1CC(", "neither a SMILES nor a SMARTS"),
                          ("C" * 400, "longer than")]:
        with pytest.raises(SeqvaeError, match=fragment):
            parse_scaffold(bad)


@pytest.mark.parametrize("kekule", [True, False])
def test_rooted_smiles_write_the_scaffold_and_end_at_an_attachment_point(kekule):
    scaffold = Chem.MolFromSmiles("c1ccc2ncccc2c1")
    ends = attachment_points(scaffold)
    assert len(ends) == 7  # quinoline: every CH
    texts = rooted_smiles(scaffold, ends, kekule, 12, np.random.default_rng(0))
    assert texts == rooted_smiles(scaffold, ends, kekule, 12, np.random.default_rng(0))
    assert len(texts) == len(set(texts)) >= 7
    decorated_at = set()
    for text in texts:
        assert Chem.MolToSmiles(Chem.MolFromSmiles(text)) == "c1ccc2ncccc2c1"
        assert (not any(c in text for c in "cn")) == kekule
        # what follows the prefix bonds to its last atom, a CH of the scaffold
        methyl = Chem.MolFromSmiles(text + "C")
        atom = [a for a in methyl.GetAtoms() if a.GetIdx() == methyl.GetNumAtoms() - 1][0]
        neighbour = atom.GetNeighbors()[0]
        assert neighbour.GetIsAromatic()
        decorated_at.add(Chem.MolToSmiles(methyl))
    assert len(decorated_at) == 7  # each attachment point ends some prefix


def test_decorations_decode_to_the_scaffold_decorated(run):
    scaffold = parse_scaffold("c1ccccc1")
    decorations = Decorations(run, scaffold, seed=0)
    ids, lengths = decorations.draw(40)
    assert ids.shape == (40, run.max_len) and lengths.shape == (40,)
    assert np.all(ids[np.arange(40), lengths] == EOS_ID)
    z = inference.prior_draw(run, 40, 0)
    texts = inference.decode(run, z, greedy=False, seed=1, prefix=ids, prefix_lengths=lengths)
    mols = [Chem.MolFromSmiles(text) for text in texts]
    # the tiny run writes aromatic SMILES, whose aromaticity the grammar cannot decide: a few
    # completions are not molecules (the search's check drops them); every molecule holds it
    assert sum(mol is not None for mol in mols) >= 5
    assert all(scaffold.contained_in(mol) for mol in mols if mol is not None)
    decorations.grow(["Cc1ccccc1", "CCc1ccccc1O"])
    assert len(decorations.grown_ids) == 2
    ids, lengths = decorations.draw(40, grown_share=0.5)
    assert len(ids) == 40


def test_a_scaffold_the_run_cannot_write_is_a_one_line_error(run):
    with pytest.raises(SeqvaeError, match="this run cannot write it"):
        Decorations(run, parse_scaffold("c1ccc(P)cc1"), seed=0)  # no P in the tiny vocabulary
