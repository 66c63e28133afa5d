"""seqvae.explore.explorer (and the map it reads, latent_map) on a tiny trained run."""

import os
import shutil
import threading

import numpy as np
import pytest

from conftest import HELD_OUT, SMILES
from seqvae.data import chemistry
from seqvae.errors import SeqvaeError
from seqvae.explore import latent_map as latent_map_lib
from seqvae.explore.explorer import Explorer
from seqvae.explore.property_head import (FittedPropertyHead, PropertyHead, default_objective,
                                          find_property_head)
from seqvae.run import load_run

MOLECULES = list(dict.fromkeys(SMILES + HELD_OUT))


class SumHead:
    """A stand-in property head: "sum" predicts sum(z) and "logp" predicts -z[0] (a stand-in
    under a name RDKit computes, so that trajectories are scored); each climbs (or descends) in
    steps of 0.1 along its gradient."""

    names = ("sum", "logp")

    def predict(self, z):
        z = np.asarray(z)
        return np.stack([z.sum(axis=1), -z[:, 0]], axis=1)

    def optimise(self, z, name, steps, minimize=False):
        direction = np.ones_like(z) if name == "sum" else -np.eye(len(z))[0]
        return np.stack([z + (-0.1 if minimize else 0.1) * k * direction
                         for k in range(steps + 1)])


@pytest.fixture(scope="module")
def run(tiny_run_dir):
    return load_run(tiny_run_dir)


@pytest.fixture(scope="module")
def molecules_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("molecules") / "molecules.smi"
    path.write_text("\n".join(MOLECULES[:10] + ["C1CC", "not a molecule"] + MOLECULES[10:]) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def explorer(run, molecules_file):
    """An explorer of the tiny run, with the stand-in property head."""
    return Explorer(run, latent_map_lib.build_map(run, molecules_file, n=100, progress=None),
                    SumHead())


def test_the_map_holds_every_encodable_molecule_with_its_properties(explorer, run):
    latent = explorer.map
    assert latent.smiles == MOLECULES  # the two invalid lines left out, the order kept
    assert latent.z.shape == (len(MOLECULES), run.config.model.latent_dim)
    assert latent.coords.shape == (len(MOLECULES), 2)
    np.testing.assert_allclose(latent.coords, latent.projection.transform(latent.z), atol=1e-5)
    index = MOLECULES.index("CC(=O)Nc1ccc(O)cc1")
    assert latent.properties["logp"][index] == pytest.approx(chemistry.logp("CC(=O)Nc1ccc(O)cc1"), abs=1e-4)
    assert latent.properties["qed"][index] == pytest.approx(chemistry.qed("CC(=O)Nc1ccc(O)cc1"), abs=1e-4)
    assert latent.properties["length"][MOLECULES.index("CCO")] == 3


def test_the_map_is_cached_in_the_run_directory(run, molecules_file):
    lines = []
    first = latent_map_lib.build_map(run, molecules_file, n=100, progress=lines.append)
    assert any("from the cache" in line for line in lines), lines  # the fixture built it
    lines.clear()
    smaller = latent_map_lib.build_map(run, molecules_file, n=12, progress=lines.append)
    assert not any("from the cache" in line for line in lines)  # another n, another map
    assert any("left out 2 of the first 12" in line for line in lines), lines
    assert smaller.smiles == first.smiles[:10]


def test_a_map_that_cannot_be_cached_is_still_built(run, molecules_file, monkeypatch):
    def refuse(self, path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(latent_map_lib.projection.PCAProjection, "save", refuse)
    lines = []
    latent = latent_map_lib.build_map(run, molecules_file, n=7, progress=lines.append)
    assert len(latent) == 7 and any("cannot cache the map" in line for line in lines)


def test_a_map_needs_two_molecules(run, tmp_path):
    with pytest.raises(SeqvaeError, match="needs at least 2 molecules"):
        latent_map_lib.build_map(run, "moses:test", n=1, progress=None)
    one = tmp_path / "one.smi"
    one.write_text("CCO\n")
    with pytest.raises(SeqvaeError, match="at least 2 molecules"):
        latent_map_lib.build_map(run, str(one), n=10, progress=None)


def test_select_decodes_the_molecule_and_its_neighbours_in_one_batch(explorer):
    index = MOLECULES.index("c1ccccc1")
    result = explorer.select(index=index, radius=0.5, count=6, seed=3)
    assert result["smiles"] == "c1ccccc1" and result["index"] == index
    assert len(result["neighbours"]) == 6
    for entry in [result["reconstruction"]] + result["neighbours"]:
        assert entry["valid"] == (chemistry.canonical_smiles(entry["smiles"]) is not None)
        assert entry["similarity"] is None or 0.0 <= entry["similarity"] <= 1.0
    assert explorer.select(index=index, radius=0.5, count=6, seed=3) == result  # seeded
    # radius 0: every neighbour is z itself, so it decodes (greedily) to the reconstruction
    still = explorer.select(index=index, radius=0.0, count=4)
    assert {e["smiles"] for e in still["neighbours"]} == {still["reconstruction"]["smiles"]}
    assert (still["x"], still["y"]) == pytest.approx(tuple(explorer.map.coords[index]), abs=1e-5)


def test_select_takes_a_typed_smiles_and_names_a_bad_one(explorer):
    result = explorer.select(smiles=" CCO ", count=2)
    assert result["smiles"] == "CCO" and result["index"] is None
    assert result["properties"]["logp"] == pytest.approx(chemistry.logp("CCO"), abs=1e-6)
    for text, message in (("C1CC", "cannot use 'C1CC': invalid SMILES"), ("", "type a SMILES"),
                          ("C" * 400, "longer than 300")):
        with pytest.raises(SeqvaeError, match=message):
            explorer.select(smiles=text)
    with pytest.raises(SeqvaeError, match="no map point 999"):
        explorer.select(index=999)


def test_beam_decoding_is_available_without_warm_up(explorer):
    result = explorer.select(index=0, count=2, beam=True)
    assert result["decoding"] == "beam 5" and len(result["neighbours"]) == 2


def test_interpolation_runs_from_start_to_end(explorer):
    result = explorer.interpolate("CCO", "c1ccccc1", steps=5)
    ts = [entry["t"] for entry in result["path"]]
    assert ts == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])
    start = explorer.map.projection.transform(explorer.encode_smiles("CCO")[None])[0]
    assert (result["path"][0]["x"], result["path"][0]["y"]) == pytest.approx(tuple(start), abs=1e-5)
    slerp = explorer.interpolate("CCO", "c1ccccc1", steps=3, slerp=True)
    assert len(slerp["path"]) == 3 and slerp["slerp"]
    with pytest.raises(SeqvaeError, match="^B: cannot use 'C1CC'"):
        explorer.interpolate("CCO", "C1CC")


def test_samples_are_seeded_and_temperature_zero_is_greedy(explorer):
    first = explorer.sample(5, temperature=0.8, seed=1)
    assert len(first["molecules"]) == 5 and first == explorer.sample(5, temperature=0.8, seed=1)
    with pytest.raises(SeqvaeError, match="temperature must be >= 0"):
        explorer.sample(5, temperature=-1)
    greedy = explorer.sample(5, temperature=0)  # as `seqvae sample --temperature 0`
    assert greedy["sampler"] == "greedy" and len(greedy["molecules"]) == 5
    assert first["sampler"] == "mask"  # the tiny run's default: model.rejection_rounds 0


def test_conditioned_samples_hold_the_scaffold_and_are_mapped(explorer):
    from rdkit import Chem

    result = explorer.sample_where(6, "", "c1ccccc1", temperature=1.0, seed=3)
    benzene = Chem.MolFromSmiles("c1ccccc1")
    assert 0 < len(result["molecules"]) <= 6 and result["sampler"] == "conditioned"
    for entry in result["molecules"]:
        assert Chem.MolFromSmiles(entry["smiles"]).HasSubstructMatch(benzene)
        assert entry["valid"] and entry["values"] == {}
        assert np.isfinite([entry["x"], entry["y"]]).all()
    assert "scaffold c1ccccc1, each checked (RDKit)" in result["summary"]
    again = explorer.sample_where(6, "", "c1ccccc1", temperature=1.0, seed=3)
    assert again["molecules"] == result["molecules"]  # the same for a seed
    with pytest.raises(SeqvaeError, match="unknown property 'foo'"):
        explorer.sample_where(6, "foo>1")


def test_samples_come_by_rejection_where_the_run_samples_so(run, explorer):
    """A run sampling by rejection (the demo's) gives the page `seqvae sample`'s molecules, each
    at the z it was decoded from (a new one for a row the grammar rejected)."""
    import dataclasses

    from seqvae import inference

    chosen = dataclasses.replace(run, config=dataclasses.replace(
        run.config, model=dataclasses.replace(run.config.model, rejection_rounds=3)))
    by_rejection = Explorer(chosen, explorer.map)
    result = by_rejection.sample(40, temperature=1.0, seed=2)
    z = inference.prior_draw(chosen, 40, 2)  # the run's own prior, as `seqvae sample` draws it
    stats: dict = {}
    texts, drawn = inference.rejection_sample(chosen, z, 3, 1.0, seed=2, stats=stats,
                                              return_z=True)
    assert texts == inference.rejection_sample(chosen, z, 3, 1.0, seed=2)
    assert [m["smiles"] for m in result["molecules"]] == texts
    assert result["sampler"] == "rejection, 3 rounds" and stats["rejected"] > 0
    moved = ~np.all(drawn == z, axis=1)
    assert moved.any() and not moved.all()
    np.testing.assert_allclose([m["x"] for m in result["molecules"]],
                               explorer.map.projection.transform(drawn)[:, 0], atol=1e-5)


def test_after_start_up_sampling_by_rejection_traces_nothing(run, explorer):
    """No temperature and no batch size makes a request wait on tracing (the server's promise)."""
    import dataclasses

    from seqvae import inference

    fresh = dataclasses.replace(run, compiled={}, config=dataclasses.replace(
        run.config, model=dataclasses.replace(run.config.model, rejection_rounds=3)))
    by_rejection = Explorer(fresh, explorer.map)
    by_rejection.warm_up(background_beam=False)
    graphs = inference.rejection_decoders(fresh)
    traced = [graph.experimental_get_tracing_count() for graph in graphs]
    by_rejection.sample(7, temperature=0.6, seed=5)
    by_rejection.sample(30, temperature=1.4, seed=6)
    assert [graph.experimental_get_tracing_count() for graph in graphs] == traced


def test_requests_in_parallel_threads_all_answer(explorer):
    results, errors = [], []

    def ask(i):
        try:
            results.append(explorer.select(index=i, count=3, seed=i))
        except Exception as error:  # noqa: BLE001 - collected for the assertion
            errors.append(error)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 4


def test_optimisation_follows_the_property_head(explorer, monkeypatch):
    z = explorer.map.z
    np.testing.assert_allclose(explorer.map.properties["predicted:sum"], z.sum(1), rtol=1e-5)
    np.testing.assert_allclose(explorer.map.properties["predicted:logp"], -z[:, 0], rtol=1e-5)
    result = explorer.optimise(z[0].tolist(), "sum", steps=4, reference=MOLECULES[0])
    predicted = [entry["predicted"] for entry in result["path"]]
    assert len(predicted) == 5 and np.all(np.diff(predicted) > 0)
    assert result["name"] == "sum" and [e["step"] for e in result["path"]] == [0, 1, 2, 3, 4]
    assert all(e["value"] is None for e in result["path"])  # RDKit does not compute "sum"
    assert (result["path"][0]["x"], result["path"][0]["y"]) == pytest.approx(
        tuple(explorer.map.coords[0]), abs=1e-4)  # the trajectory starts at the molecule
    down = explorer.optimise(z[0].tolist(), steps=3, minimize=True)  # logp: PREFERRED to sum
    assert down["name"] == "logp" and down["minimize"]
    assert np.all(np.diff([e["predicted"] for e in down["path"]]) < 0)
    for entry in down["path"]:  # RDKit's logP of each decoded molecule, None when invalid
        assert entry["value"] == (pytest.approx(chemistry.logp(entry["smiles"]), abs=1e-4)
                                  if entry["valid"] else None)
    with pytest.raises(SeqvaeError, match="predicts sum, logp, not 'qed'"):
        explorer.optimise(z[0].tolist(), "qed")
    typed = explorer.select(smiles="CCO", count=1)
    assert typed["properties"]["predicted:sum"] == pytest.approx(sum(typed["z"]), abs=1e-5)
    monkeypatch.setattr(explorer, "head", None)
    with pytest.raises(SeqvaeError, match="no property head"):
        explorer.optimise(z[0].tolist())


def test_the_default_objective_is_a_benchmark_property_when_the_head_has_one():
    assert default_objective(("mw", "qed", "plogp")) == "plogp"
    assert default_objective(("logp", "qed")) == "qed"
    assert default_objective(("col:pIC50", "mw")) == "col:pIC50"


def test_find_property_head_takes_the_runs_own_or_none(run):
    assert find_property_head(run) is None  # no RUN/property_head/, no joint head
    head = SumHead()
    assert isinstance(head, PropertyHead)
    run.property_head = head
    try:
        assert find_property_head(run) is head
        run.property_head = object()  # no PropertyHead interface: ignored
        assert find_property_head(run) is None
    finally:
        del run.property_head


@pytest.fixture(scope="module")
def run_with_head(tiny_run_dir, tmp_path_factory):
    """A copy of the tiny run with a property head (logP, QED) fitted on its training molecules."""
    from seqvae.property_fit import fit_properties

    copy = str(tmp_path_factory.mktemp("with-head") / "run")
    shutil.copytree(tiny_run_dir, copy)
    fit_properties(copy, "logp,qed", data=MOLECULES, limit=0, test=None, epochs=5)
    return load_run(copy)


def test_a_fitted_head_climbs_its_prediction_in_steps_within_the_trust_region(run_with_head):
    head = find_property_head(run_with_head)
    assert isinstance(head, FittedPropertyHead) and head.names == ("logp", "qed")
    z0 = np.random.default_rng(0).standard_normal(run_with_head.config.model.latent_dim)
    assert head.predict(z0[None]).shape == (1, 2)
    for minimize in (False, True):
        path = head.optimise(z0, "logp", 12, minimize)  # 12 steps of 0.25: the region (2) binds
        assert path.shape == (13, len(z0)) and np.allclose(path[0], z0)
        distance = np.linalg.norm(path - z0, axis=1)
        assert distance.max() <= 2.0 + 1e-4
        np.testing.assert_allclose(np.linalg.norm(np.diff(path[:5], axis=0), axis=1), 0.25,
                                   rtol=1e-4)
        logp = head.predict(path)[:, 0]
        assert (logp[-1] < logp[0]) if minimize else (logp[-1] > logp[0])
    assert head.optimise(z0, "qed", 2).shape == (3, len(z0))


def test_a_damaged_head_leaves_the_explorer_without_optimisation(run_with_head, tmp_path, capsys):
    copy = str(tmp_path / "run")
    shutil.copytree(run_with_head.run_dir, copy)
    with open(os.path.join(copy, "property_head", "head.weights.h5"), "wb") as out:
        out.write(b"not hdf5")
    assert find_property_head(load_run(copy)) is None
    assert "no Optimise panel" in capsys.readouterr().err
