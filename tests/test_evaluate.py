"""Tests for seqvae.evaluate on one tiny run trained per module (20 steps, seconds)."""

import dataclasses
import json
import math

import numpy as np
import pytest
from conftest import SMILES, train_tiny_run

from seqvae import evaluate as ev
from seqvae import inference, metrics
from seqvae.errors import SeqvaeError

# Held-out molecules written with the training set's tokens only.
TEST = ["CCCO", "CCN", "c1ccccc1C", "CC(=O)N", "OCCO", "CCCl", "c1ccc(Br)cc1", "CC(C)(C)O",
        "CCOC", "NCCO"]
UNENCODABLE = ["CCI", "C1CC"]  # iodine is not in the vocabulary; an unclosed ring is invalid
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_tiny_run(tmp_path_factory.mktemp("evaluate"))


# --- vae_quality ---------------------------------------------------------------------------------


def test_vae_quality_values_and_bounds(run):
    quality = ev.vae_quality(run, TEST, iw_samples=10, batch_size=4)
    latent_dim = run.config.model.latent_dim
    assert quality["sequences"] == len(TEST) and quality["iw_samples"] == 10
    assert len(quality["kl_per_dimension"]) == latent_dim == quality["latent_dim"]
    assert len(quality["posterior_mean_variance"]) == latent_dim
    for key in ("elbo", "recon", "kl", "nll_iw", "nll_iw_per_token", "perplexity_iw",
                "mutual_information", "tokens_per_sequence"):
        assert math.isfinite(quality[key]), key
    assert quality["recon"] > 0 and quality["kl"] >= 0
    assert quality["elbo"] == pytest.approx(-quality["recon"] - quality["kl"], rel=1e-5)
    assert sum(quality["kl_per_dimension"]) == pytest.approx(quality["kl"], rel=1e-4)
    assert 0 <= quality["active_units"] <= latent_dim
    # the importance-weighted bound is the tighter one (on average over sequences)
    assert quality["nll_iw"] <= -quality["elbo"] + 0.05 * abs(quality["elbo"])
    assert quality["nll_iw_per_token"] == pytest.approx(
        quality["nll_iw"] / quality["tokens_per_sequence"], rel=1e-5)
    # batches of 4, 4 and 2: the estimate lies in [0, log 4] up to Monte Carlo error
    assert -0.1 <= quality["mutual_information"] <= math.log(4) + 0.1
    assert quality["mutual_information_batch_size"] == 4


def test_vae_quality_is_seeded(run):
    first = ev.vae_quality(run, TEST, iw_samples=3, seed=1)
    assert ev.vae_quality(run, TEST, iw_samples=3, seed=1) == first
    assert ev.vae_quality(run, TEST, iw_samples=3, seed=2)["nll_iw"] != first["nll_iw"]


def test_vae_quality_needs_a_sample(run):
    with pytest.raises(SeqvaeError, match="iw_samples"):
        ev.vae_quality(run, TEST, iw_samples=0)


def test_mutual_information_of_identical_and_of_separated_posteriors():
    batch, dims = 5, 3
    log_var = np.full((batch, dims), np.log(0.25))
    # z = mean + std: each draw sits exactly one standard deviation out in every dimension,
    # so E_q[log q(z|x)] matches its closed form and the estimate is exact.
    same = np.ones((batch, dims))
    assert ev._batch_mutual_information(same, log_var, same + 0.5) == pytest.approx(0.0, abs=1e-12)
    apart = 100.0 * np.arange(batch)[:, None] * np.ones((1, dims))  # posteriors far from each other
    separated = ev._batch_mutual_information(apart, log_var, apart + 0.5)
    assert separated == pytest.approx(math.log(batch))


# --- reconstruction ------------------------------------------------------------------------------


def test_reconstruction_protocol_keys_and_ranges(run):
    result = ev.reconstruction_protocol(run, TEST, n_molecules=5, n_encodings=2, n_decodings=3)
    assert result["molecules"] == 5
    assert (result["encodings_per_molecule"], result["decodings_per_encoding"]) == (2, 3)
    for key in ("reconstruction", "reconstructed_at_least_once", "valid_decodings",
                "token_accuracy_mean_z", "sequence_accuracy_mean_z"):
        assert 0.0 <= result[key] <= 1.0, key
    assert result["reconstructed_at_least_once"] >= result["reconstruction"]
    again = ev.reconstruction_protocol(run, TEST, n_molecules=5, n_encodings=2, n_decodings=3)
    assert again == result  # seeded


def test_reconstruction_compares_canonical_smiles(run, monkeypatch):
    """Decodings are rows ``(d * E + e) * N + i``; a differently written SMILES still counts."""
    inputs = ["CCCO", "CCN"]
    other_spelling = {"CCCO": "OCCC", "CCN": "NCC"}

    def fake_decode(run, z, greedy, seed):
        assert not greedy and len(z) == 1 * 4 * len(inputs)
        return [other_spelling[inputs[row % 2]] if row < 2 else "" for row in range(len(z))]

    monkeypatch.setattr(ev.inference, "decode", fake_decode)
    result = ev.reconstruction_protocol(run, inputs, n_molecules=2, n_encodings=1, n_decodings=4)
    assert result["reconstruction"] == 0.25  # the first of four decodings of each molecule
    assert result["reconstructed_at_least_once"] == 1.0
    assert result["valid_decodings"] == 0.25


# --- sampling and the whole evaluation -----------------------------------------------------------


def test_sample_prior_gives_inference_samples(run):
    lines = []
    texts = ev.sample_prior(run, 7, seed=3, batch_size=3, progress=lines.append)
    assert texts == inference.sample(run, 7, seed=3, batch_size=3)
    assert len(lines) == 3 and lines[-1].startswith("sampled 7/7")


def _strict_json(path):
    def reject(constant):
        raise ValueError(f"{constant} is not JSON")

    with open(path) as handle:
        return json.load(handle, parse_constant=reject)


def test_evaluate_end_to_end(run):
    lines = []
    results = ev.evaluate(run.run_dir, n_samples=50, test=TEST + UNENCODABLE,
                          test_scaffolds=TEST[:6], train=SMILES, include_fcd=False, iw_samples=3,
                          recon_molecules=4, quality_sequences=12, progress=lines.append)
    assert results["n_samples"] == 50 and results["tokenizer"] == "smiles"
    generation = results["generation"]
    for key in ("valid", "SNN/Test", "SNN/TestSF", "IntDiv", "Filters", "Novelty"):
        assert key in generation, key
    assert generation["FCD/Test"] is None and 0 <= generation["valid"] <= 1
    assert results["vae_quality"]["sequences"] == len(TEST)  # the unencodable two left out
    assert results["reconstruction"]["molecules"] == 4
    assert results["references"]["test"] == "list (12 sequences)"
    assert any("2 of the first 12 test sequences left out" in n for n in results["notes"])
    assert any(n.startswith("FCD not computed") for n in results["notes"])
    assert set(results["wall_seconds"]) >= {"sampling", "generation_metrics", "vae_quality",
                                            "reconstruction", "total"}
    assert any(line.startswith("sampled 50/50") for line in lines)

    report = results["report_dir"]
    with open(f"{report}/samples.smi") as handle:
        samples = handle.read().split("\n")[:-1]
    assert samples == inference.sample(run, 50, seed=0)  # the strings the metrics were computed on
    assert metrics.fraction_valid(samples) == pytest.approx(generation["valid"])
    stored = _strict_json(f"{report}/metrics.json")
    assert stored["vae_quality"]["nll_iw"] == pytest.approx(results["vae_quality"]["nll_iw"])
    for name in ("training_curves", "kl_per_dimension", "latent_map", "property_histograms"):
        with open(f"{report}/{name}.png", "rb") as handle:
            assert handle.read(8) == PNG_SIGNATURE, name
    with open(f"{report}/report.md") as handle:
        markdown = handle.read()
    assert "| valid |" in markdown and "| nll_iw |" in markdown and "| total |" in markdown


def test_evaluate_without_references_skips_and_notes(run):
    results = ev.evaluate(run.run_dir, n_samples=20, include_fcd=False, recon_molecules=0,
                          quality_sequences=0, progress=None)
    generation = results["generation"]
    for key in ("SNN/Test", "Frag/TestSF", "Scaf/Test", "Novelty"):
        assert generation[key] is None, key
    assert generation["IntDiv"] is not None
    assert results["vae_quality"] is None and results["reconstruction"] is None
    notes = " | ".join(results["notes"])
    assert "no test set given" in notes and "no test_scaffolds set given" in notes
    assert "Novelty not computed" in notes
    assert results["references"] == {"test": None, "test_scaffolds": None, "train": None}


def test_evaluate_notes_a_missing_fcd(run, monkeypatch):
    def missing():
        raise metrics.MissingExtraError("FCD needs the fcd extra (No module named 'fcd'); "
                                        "pip install fcd")

    monkeypatch.setattr(metrics, "_import_fcd", missing)
    results = ev.evaluate(run.run_dir, n_samples=20, test=TEST, test_scaffolds=TEST,
                          include_fcd=True, recon_molecules=0, quality_sequences=0, progress=None)
    assert results["generation"]["FCD/Test"] is None
    assert results["generation"]["FCD/TestSF"] is None
    assert any(n.startswith("FCD not computed: FCD needs the fcd extra") and "pip install" in n
               for n in results["notes"])


def test_missing_reference_hides_its_fcd_note(run, monkeypatch):
    """Only the given reference's FCD note is kept when FCD runs but yields no statistics."""
    monkeypatch.setattr(metrics, "_import_fcd", lambda: None)
    monkeypatch.setattr(metrics, "_chemnet_statistics", lambda smiles: (None, None))
    notes = []
    values = ev._generation_metrics(inference.sample(run, 20), None, TEST, None, True, None, notes)
    assert values["FCD/Test"] is None and values["SNN/TestSF"] is None
    assert any(n.startswith("FCD/Test not computed") for n in notes)
    assert not any(n.startswith("FCD/TestSF not computed: its") for n in notes)


def test_evaluate_moses_run_uses_the_moses_splits(run, monkeypatch):
    moses_run = dataclasses.replace(run, info={**run.info, "data_source": "moses:train"})
    monkeypatch.setattr(ev, "load_run", lambda run_dir: moses_run)
    splits = {"train": SMILES, "test": TEST, "test_scaffolds": TEST[:4]}
    monkeypatch.setattr(metrics, "load_moses_split", lambda split: list(splits[split]))
    monkeypatch.setattr(metrics, "_default_reference",
                        lambda split, include_fcd, progress: metrics.reference_stats(splits[split]))
    results = ev.evaluate(run.run_dir, n_samples=20, include_fcd=False, iw_samples=2,
                          recon_molecules=2, quality_sequences=4, progress=None)
    assert results["references"] == {"test": "moses:test", "test_scaffolds": "moses:test_scaffolds",
                                      "train": "moses:train"}
    assert results["generation"]["SNN/TestSF"] is not None
    assert results["generation"]["Novelty"] is not None
    assert results["vae_quality"]["sequences"] == 4
