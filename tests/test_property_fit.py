"""Fitting, saving, loading and using a property head on a tiny run."""

import json
import os

import numpy as np
import pytest

from conftest import HELD_OUT, SMILES
from seqvae import inference
from seqvae.errors import SeqvaeError
from seqvae import property_fit


@pytest.mark.parametrize("schedule", ["cosine", "constant"])
def test_fit_head_learns_a_smooth_function(schedule):
    rng = np.random.default_rng(0)
    z = rng.standard_normal((2000, 6)).astype(np.float32)
    values = np.stack([3 * z[:, 0] - z[:, 1] + 10, np.tanh(z[:, 2])], axis=1)
    values[::50, 1] = np.nan  # unknown targets are skipped
    head, mean, std, history = property_fit.fit_head(z, values, epochs=20, seed=0,
                                                     schedule=schedule)
    test = rng.standard_normal((500, 6)).astype(np.float32)
    truth = np.stack([3 * test[:, 0] - test[:, 1] + 10, np.tanh(test[:, 2])], axis=1)
    predicted = head(test).numpy() * std + mean
    metrics = property_fit.regression_metrics(truth, predicted, ["a", "b"])
    assert metrics["a"]["r2"] > 0.98 and metrics["b"]["r2"] > 0.9
    assert history[-1][0] < history[0][0]


def test_the_cosine_fit_ends_at_a_hundredth_of_its_rate(monkeypatch):
    import keras

    made = []
    adam = keras.optimizers.Adam
    monkeypatch.setattr(keras.optimizers, "Adam", lambda rate: made.append(adam(rate)) or made[-1])
    z = np.random.default_rng(0).standard_normal((1000, 4)).astype(np.float32)
    property_fit.fit_head(z, z[:, :1] * 2, epochs=3, batch_size=100, learning_rate=1e-2)
    optimizer = made[0]
    assert int(optimizer.iterations) == 3 * 9  # 950 training rows in 9 batches, 3 epochs
    assert float(optimizer.learning_rate) == pytest.approx(1e-4, rel=1e-3)
    with pytest.raises(SeqvaeError, match="schedule must be one of cosine, constant"):
        property_fit.fit_head(z, z[:, :1], epochs=1, schedule="linear")
    with pytest.raises(SeqvaeError, match="activation one of tanh, silu, gelu, relu"):
        property_fit.fit_head(z, z[:, :1], epochs=1, activation="softsign")


def test_a_head_keeps_its_activation_through_save_and_load(run):
    info = property_fit.fit_properties(run.run_dir, "logp", data=SMILES, limit=0, test=None,
                                       epochs=1, activation="gelu")
    assert info["activation"] == "gelu" and info["schedule"] == "cosine"
    head = property_fit.load_head(run)
    assert [layer.activation.__name__ for layer in head.model.hiddens] == ["gelu"] * 3
    z = inference.encode(run, HELD_OUT[:4])[0]
    np.testing.assert_allclose(head.predict(z), property_fit.load_head(run).predict(z), rtol=1e-6)
    folder = os.path.join(run.run_dir, "property_head")  # a head saved before the option: tanh
    saved = json.load(open(os.path.join(folder, "head.json")))
    del saved["activation"]
    json.dump(saved, open(os.path.join(folder, "head.json"), "w"))
    assert [layer.activation.__name__ for layer in property_fit.load_head(run).model.hiddens] \
        == ["tanh"] * 3


def test_regression_metrics_by_hand():
    values = np.array([[1.0], [2.0], [3.0], [np.nan]])
    predicted = np.array([[1.0], [2.0], [4.0], [0.0]])
    m = property_fit.regression_metrics(values, predicted, ["x"])["x"]
    assert m == {"r2": pytest.approx(1 - 1 / 2), "mae": pytest.approx(1 / 3), "n": 3}


def test_fit_save_load_predict(run):
    info = property_fit.fit_properties(run.run_dir, "logp,qed", data=SMILES, limit=0,
                                       test=HELD_OUT, epochs=3)
    assert info["names"] == ["logp", "qed"] and info["fit_molecules"] == len(SMILES)
    assert set(info["test"]) == {"logp", "qed"} and info["test"]["logp"]["n"] == len(HELD_OUT)
    saved = json.load(open(os.path.join(run.run_dir, "property_head", "head.json")))
    assert saved["depth"] == 3 and saved["width"] == 67
    head = property_fit.load_head(run)
    texts, values = property_fit.predict(run, HELD_OUT[:3], head)
    assert texts == HELD_OUT[:3] and values.shape == (3, 2) and np.all(np.isfinite(values))
    # the head reads encodings standardised with the fit encodings' statistics (head.json)
    z = inference.encode(run, HELD_OUT[:3])[0]
    fit_z = inference.encode(run, SMILES)[0]
    np.testing.assert_allclose(saved["z_mean"], fit_z.mean(0), atol=1e-5)
    np.testing.assert_allclose(saved["z_std"], fit_z.std(0), rtol=1e-4)
    by_hand = head.model((z - fit_z.mean(0)) / fit_z.std(0)).numpy() * saved["std"] + saved["mean"]
    np.testing.assert_allclose(values, by_hand, rtol=1e-4, atol=1e-5)
    with pytest.raises(SeqvaeError, match="not 'sa'"):
        head.index("sa")
    from seqvae.evaluation.evaluate import _property_metrics  # what evaluate reports

    metrics = _property_metrics(run, HELD_OUT, lambda line: None, [])
    assert set(metrics) == {"logp R2", "logp MAE", "qed R2", "qed MAE", "molecules"}
    assert metrics["molecules"] == len(HELD_OUT)
    from seqvae.explore.property_head import (PropertyHead, default_objective,  # the explorer's
                                              find_property_head)

    shown = find_property_head(run)
    assert isinstance(shown, PropertyHead) and default_objective(shown.names) == "qed"
    z = inference.encode(run, HELD_OUT[:2])[0]
    np.testing.assert_allclose(shown.predict(z), head.predict(z), rtol=1e-6)
    path = shown.optimise(z[0], "qed", 3)
    assert path.shape == (4, z.shape[1]) and np.allclose(path[0], z[0])
    assert shown.predict(path)[-1, 1] > shown.predict(path)[0, 1]


def test_missing_head_is_a_one_line_error(tmp_path, run):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run.run_dir, copy, ignore=shutil.ignore_patterns("property_head"))
    from seqvae.run import load_run

    with pytest.raises(SeqvaeError, match="has no property head; fit one with"):
        property_fit.load_head(load_run(str(copy)))


def test_jointly_trained_head(tmp_path):
    """data.properties trains the head with the VAE; the run's head then predicts them."""
    import dataclasses

    from conftest import tiny_config
    from seqvae.training.loop import train
    from seqvae.run import load_run

    config = tiny_config()
    config = dataclasses.replace(
        config, data=dataclasses.replace(config.data, properties="logp,qed"),
        train=dataclasses.replace(config.train, max_steps=6, epochs=1000))
    run_dir = str(tmp_path / "joint")
    train(config, run_dir, data=SMILES)
    run = load_run(run_dir)
    assert run.info["properties"]["names"] == ["logp", "qed"]
    assert os.path.exists(os.path.join(run_dir, "properties", "training.npz"))
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    assert all("property" in r for r in records if r["kind"] == "step")
    assert any("val_property" in r for r in records)
    head = property_fit.load_head(run)
    assert head.info["joint"] and head.names == ("logp", "qed")
    texts, values = property_fit.predict(run, HELD_OUT[:2], head)
    assert values.shape == (2, 2) and np.all(np.isfinite(values))
    # the checkpoint holds the head: a second load predicts the same
    again = property_fit.predict(load_run(run_dir), HELD_OUT[:2])[1]
    np.testing.assert_allclose(values, again, rtol=1e-6)
    from seqvae.evaluation.evaluate import _property_metrics  # evaluate reports the joint head too

    assert property_fit.has_head(run)
    metrics = _property_metrics(run, HELD_OUT, lambda line: None, [])
    assert set(metrics) == {"logp R2", "logp MAE", "qed R2", "qed MAE", "molecules"}


def test_a_larger_table_computes_only_the_new_molecules(tmp_path, run, monkeypatch):
    from seqvae.data import properties

    path = tmp_path / "mols.smi"
    path.write_text("\n".join(SMILES[:8]) + "\n")
    fresh = properties.read_property_table(str(path), ("logp", "qed"))
    computed = []
    real = properties.rdkit_properties

    def counting(texts, names, progress=None):
        computed.extend(texts)
        return real(texts, names, progress)

    monkeypatch.setattr(properties, "rdkit_properties", counting)
    first = property_fit.property_table(run, str(path), ("logp", "qed"), limit=5)
    assert computed == SMILES[:5]
    computed.clear()
    larger = property_fit.property_table(run, str(path), ("logp", "qed"), limit=8)
    assert computed == SMILES[5:8]  # the first five come from the cached table
    np.testing.assert_array_equal(larger.values, fresh.values)
    np.testing.assert_array_equal(first.values, fresh.values[:5])
    computed.clear()
    other = property_fit.property_table(run, str(path), ("qed",), limit=8)  # other names:
    assert computed == SMILES[:8]  # nothing reused
    np.testing.assert_array_equal(other.values[:, 0], fresh.values[:, 1])


def test_known_properties_gathers_the_cached_tables_holding_the_names(tmp_path, run):
    import shutil

    from conftest import copy_run
    from seqvae.run import read_run_files

    copy = copy_run(run.run_dir, tmp_path / "copy")
    shutil.rmtree(os.path.join(copy, property_fit.CACHE_DIR), ignore_errors=True)
    run = read_run_files(copy)  # no table cached yet
    first, second = tmp_path / "a.smi", tmp_path / "b.smi"
    first.write_text("\n".join(SMILES[:6] + ["not a molecule"]) + "\n")
    second.write_text("\n".join(SMILES[4:10]) + "\n")
    property_fit.property_table(run, str(first), ("logp", "qed", "mw"))
    property_fit.property_table(run, str(second), ("qed", "mw"))
    known = property_fit.known_properties(run, ("mw", "qed"))
    # each molecule once (the tables come in the order of their files), the invalid left out
    assert sorted(known.texts) == sorted(set(SMILES[:10])) and len(known.texts) == 10
    assert known.names == ("mw", "qed") and not np.isnan(known.values).any()
    row = known.texts.index("CCO")
    assert known.values[row, 0] == pytest.approx(46.069, abs=1e-3)
    only_first = property_fit.known_properties(run, ("logp",))
    assert sorted(only_first.texts) == sorted(set(SMILES[:6]))
    assert property_fit.known_properties(run, ("sa",)) is None
