"""Latent-space optimisation on a tiny run with a stub property."""

import numpy as np
import pytest
import tensorflow as tf

from conftest import HELD_OUT, SMILES
from seqvae import optimize as opt
from seqvae.data import properties as props
from seqvae.errors import SeqvaeError
from seqvae.training import property_fit


def heavy_atoms(mol) -> float:
    """The stub property: the number of heavy atoms."""
    return float(mol.GetNumAtoms())


@pytest.fixture(scope="module")
def stub_head(run):
    """A head fitted on the tiny run's encodings to predict the number of heavy atoms."""
    from rdkit import Chem

    z, _ = __import__("seqvae.inference", fromlist=["encode"]).encode(run, SMILES)
    values = np.array([[Chem.MolFromSmiles(s).GetNumAtoms()] for s in SMILES], float)
    model, mean, std, _ = property_fit.fit_head(z, values, epochs=30)
    return property_fit.FittedHead(("atoms",), mean, std, model, {})


def test_ascent_paths_climb_and_stay_in_the_trust_region():
    w = tf.constant([1.0, -2.0, 0.5], tf.float32)
    z0 = np.zeros((4, 3), np.float32)
    settings = opt.OptimizeSettings(steps=6, restarts=3, step_size=0.4, trust_radius=1.0)
    paths = opt.ascent_paths(lambda z: tf.linalg.matvec(z, w), z0, settings)
    assert paths.shape == (4, 3, 7, 3)
    values = paths @ w.numpy()
    assert np.all(np.diff(values[:, 0], axis=1) >= -1e-6)  # restart 0 climbs from z0
    assert np.all(paths[:, 0, 0] == 0)
    assert np.all(np.linalg.norm(paths, axis=-1) <= 1.0 + 1e-5)
    # the trust region's best point is reached: w / |w| at distance 1
    assert values[0, 0, -1] == pytest.approx(np.linalg.norm(w.numpy()), rel=1e-3)


def test_stub_objective_improves_and_values_are_rescored(run, stub_head):
    settings = opt.OptimizeSettings(similarity=0.0, steps=4, restarts=2, step_size=0.5,
                                    trust_radius=3.0, samples=2)
    found = opt.optimize(run, "atoms", HELD_OUT, settings=settings, head=stub_head,
                         score=heavy_atoms, keep_trajectory=True)
    assert [r.start for r in found.results] == HELD_OUT
    from rdkit import Chem

    for r in found.results:
        assert r.start_value == heavy_atoms(Chem.MolFromSmiles(r.start))
        if r.smiles:
            assert r.value == heavy_atoms(Chem.MolFromSmiles(r.smiles))  # RDKit, not the head
            assert r.improvement == r.value - r.start_value
    assert any(r.success for r in found.results)
    summary = opt.summarize(found.results)
    assert summary["starts"] == len(HELD_OUT) and summary["improvement_mean"] > 0
    assert len(found.trajectory) == len(HELD_OUT) * 2 * 5 * 3
    lines = opt.path_lines(found.trajectory, start_index=1)
    assert lines[0].split()[:3] == ["restart", "step", "|z-z0|"] and len(lines) == 1 + 2 * 5
    first = [p for p in found.trajectory if p["start_index"] == 1 and p["decoding"] == "greedy"][0]
    assert lines[1].split()[:2] == ["0", "0"] and lines[1].endswith(first["smiles"] or "(invalid)")


@pytest.mark.parametrize("similarity", [0.4, 0.6])
def test_similarity_constraint_is_never_violated(run, stub_head, similarity):
    settings = opt.OptimizeSettings(similarity=similarity, steps=3, restarts=2, samples=3,
                                    trust_radius=3.0, step_size=1.0)
    found = opt.optimize(run, "atoms", HELD_OUT + ["not a molecule"], settings=settings,
                         head=stub_head, score=heavy_atoms)
    assert found.results[-1].smiles == "" and found.results[-1].start == "not a molecule"
    for r in found.results:
        if r.smiles:
            fp = props.morgan_fingerprint
            assert r.similarity >= similarity
            assert props.tanimoto(fp(r.start), fp(r.smiles)) == pytest.approx(r.similarity)
            assert r.smiles != props.chemistry.canonical_smiles(r.start)
    rows = opt.results_csv(found.results).splitlines()
    assert rows[0].startswith("start,smiles,start_value,value,similarity")
    assert len(rows) == len(HELD_OUT) + 2


def test_unconstrained_search_from_the_prior(run, stub_head):
    settings = opt.OptimizeSettings(steps=2, restarts=1, samples=1)
    found = opt.optimize(run, "atoms", None, n=6, settings=settings, head=stub_head,
                         score=heavy_atoms)
    assert len(found.results) == 6 and found.scored
    assert all(v == heavy_atoms(props.chemistry.to_mol(s)) for s, v in found.scored.items())


def test_objective_must_be_an_rdkit_property_the_head_predicts(run, stub_head):
    with pytest.raises(SeqvaeError, match="not a property RDKit computes"):
        opt.optimize(run, "atoms", HELD_OUT, head=stub_head)
    with pytest.raises(SeqvaeError, match="predicts atoms, not 'qed'"):
        opt.optimize(run, "qed", HELD_OUT, head=stub_head)
    with pytest.raises(SeqvaeError, match="--similarity"):
        opt.OptimizeSettings(similarity=1.5)
