"""Latent-space optimisation on a tiny run with a stub property."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from conftest import HELD_OUT, SMILES
from seqvae import optimize as opt
from seqvae.data import properties as props
from seqvae.errors import SeqvaeError
from seqvae import property_fit


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
                                    trust_radius=3.0, samples=2, rounds=1, keep=())
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
    assert lines[0].split()[:4] == ["round", "restart", "step", "|z-z0|"] and len(lines) == 1 + 2 * 5
    first = [p for p in found.trajectory if p["start_index"] == 1 and p["decoding"] == "greedy"][0]
    assert lines[1].split()[:3] == ["0", "0", "0"] and lines[1].endswith(first["smiles"] or "(invalid)")


def test_later_rounds_climb_from_the_best_molecules_found(run, stub_head):
    """Round 2 starts its paths at the encodings of each start's best molecules of round 1; the
    result is the best over both rounds, and a second round never loses what the first found."""
    one = opt.OptimizeSettings(similarity=0.0, steps=2, restarts=2, samples=2, trust_radius=3.0,
                               step_size=0.5, rounds=1, keep=())
    two = opt.OptimizeSettings(similarity=0.0, steps=2, restarts=2, samples=2, trust_radius=3.0,
                               step_size=0.5, rounds=2, elites=2, keep=())
    first = opt.optimize(run, "atoms", HELD_OUT, settings=one, head=stub_head, score=heavy_atoms)
    both = opt.optimize(run, "atoms", HELD_OUT, settings=two, head=stub_head, score=heavy_atoms,
                        keep_trajectory=True)
    for a, b in zip(first.results, both.results):
        assert b.candidates >= a.candidates
        if a.smiles:
            assert b.value >= a.value and b.round in (0, 1)
    # round 1: 2 restarts x 3 points x 3 decodings; round 2: 2 elites x 1 restart each, the same
    per_start = 2 * 3 * 3
    found_rows = both.trajectory
    assert len(found_rows) == len(HELD_OUT) * 2 * per_start
    rounds = {p["round"] for p in found_rows}
    assert rounds == {0, 1}
    # a round-2 path begins at the encoding of a round-1 molecule of its start (its elite)
    from seqvae import inference

    pools = [{} for _ in HELD_OUT]
    for p in found_rows:
        if p["round"] == 0 and p["smiles"] and p["smiles"] != props.chemistry.canonical_smiles(HELD_OUT[p["start_index"]]):
            pools[p["start_index"]].setdefault(p["smiles"], p["value"])
    s = max(range(len(HELD_OUT)), key=lambda i: len(pools[i]))
    best = max(pools[s], key=lambda k: pools[s][k])
    z_best, _ = inference.encode(run, [best])
    z0, _ = inference.encode(run, [HELD_OUT[s]])
    begin = [p for p in found_rows if p["start_index"] == s and p["round"] == 1 and p["step"] == 0
             and p["restart"] == 0 and p["decoding"] == "greedy"][0]
    assert begin["distance"] == pytest.approx(float(np.linalg.norm(z_best[0] - z0[0])), abs=1e-4)


def test_elite_centres_fall_back_to_the_start(run):
    """Starts with fewer molecules found than elites keep z0 in the remaining slots."""
    z0 = np.arange(2 * run.config.model.latent_dim, dtype=np.float32).reshape(2, -1)
    found = opt.search._Found(1.0, 0.5, 0, 0, 0, np.full(z0.shape[1], 7.0, np.float32), 0.0, 0.0)
    pools = [{SMILES[0]: found}, {}]
    centres = opt.elite_centres(run, pools, z0, 2, 1.0)
    assert centres.shape == (2, 2, z0.shape[1])
    from seqvae import inference

    assert np.allclose(centres[0, 0], inference.encode(run, [SMILES[0]])[0][0], atol=1e-5)
    assert np.array_equal(centres[0, 1], z0[0]) and np.array_equal(centres[1], z0[[1, 1]])
    pools = [{"C" * 500: found}, {}]  # too long for the run: the point it was decoded from
    assert np.array_equal(opt.elite_centres(run, pools, z0, 1, 1.0)[0, 0], found.z)


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
    with pytest.raises(SeqvaeError, match="similarity must be"):
        opt.OptimizeSettings(similarity=1.5)
    with pytest.raises(SeqvaeError, match="rounds and elites"):
        opt.OptimizeSettings(rounds=0)


def test_beam_hypotheses_join_the_candidates_at_each_path_start(run, stub_head):
    """--beam K: every hypothesis of a width-K beam search from each path's first point, best
    first; the best is what a beam decoding keeps."""
    from seqvae import inference

    z = np.random.default_rng(1).standard_normal((3, run.config.model.latent_dim)).astype(np.float32)
    found = inference.beam_hypotheses(run, z, 4)
    assert [len(texts) for texts in found] == [4, 4, 4]
    assert [texts[0] for texts in found] == inference.decode(run, z, beam_width=4)
    settings = opt.OptimizeSettings(similarity=0.0, steps=2, restarts=2, samples=1, beam=4,
                                    rounds=1, keep=())
    result = opt.optimize(run, "atoms", HELD_OUT[:2], settings=settings, head=stub_head,
                          score=heavy_atoms, keep_trajectory=True)
    beams = [p for p in result.trajectory if p["decoding"].startswith("beam")]
    assert {p["step"] for p in beams} == {0} and len(beams) == 2 * 2 * 4
    assert {p["decoding"] for p in beams} == {"beam1", "beam2", "beam3", "beam4"}
    assert len(result.trajectory) == 2 * 2 * 3 * 2 + len(beams)


def test_keep_decodes_completions_of_the_start_prefix(run, stub_head):
    """--keep F: every point is also decoded with the first F of the start's tokens forced, the
    decoder completing them; those decodings begin with the start's own prefix."""
    from seqvae.data.preparation import encode_texts, ids_to_texts
    from seqvae.data.vocabulary import EOS_ID

    settings = opt.OptimizeSettings(similarity=0.0, steps=1, restarts=2, samples=2, rounds=1,
                                    keep=(0.5, 0.8))
    found = opt.optimize(run, "atoms", HELD_OUT[:3], settings=settings, head=stub_head,
                         score=heavy_atoms, keep_trajectory=True)
    names = {p["decoding"] for p in found.trajectory}
    assert names == {"greedy", "sample1", "sample2", "keep0.5_greedy", "keep0.5_sample1",
                     "keep0.5_sample2", "keep0.8_greedy", "keep0.8_sample1", "keep0.8_sample2"}
    z = np.zeros((3, run.config.model.latent_dim), np.float32)
    ids = encode_texts(run.codec, HELD_OUT[:3]).ids
    run.raw_output = True  # the strings as decoded (canonical SMILES reorder the atoms)
    try:
        decoded = opt.decode_points(run, z, settings, prefixes=ids)
    finally:
        run.raw_output = False
    for fraction in (0.5, 0.8):
        for name in ("greedy", "sample1"):
            texts = decoded[f"keep{fraction:g}_{name}"]
            for row, text in enumerate(texts):
                count = int(np.argmax(ids[row] == EOS_ID))
                kept = int(np.floor(fraction * count))
                start_text = ids_to_texts(dataclasses.replace(run.codec, canonical=False),
                                          ids[row:row + 1, :kept])[0]
                assert kept >= 1 and text.startswith(start_text), (text, start_text)
    with pytest.raises(SeqvaeError, match="keep fractions"):
        opt.OptimizeSettings(keep=(1.0,))
