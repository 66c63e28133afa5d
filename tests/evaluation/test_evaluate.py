"""Tests for seqvae.evaluate on one tiny run trained per module (20 steps, seconds)."""

import dataclasses
import json
import os

import pytest
from conftest import SMILES, copy_run

from seqvae import inference
from seqvae.data.sources import Sequences
from seqvae.evaluation import chemnet, evaluate as ev, metrics, references
from seqvae.evaluation import moses_metrics

# Held-out molecules written with the training set's tokens only.
TEST = ["CCCO", "CCN", "c1ccccc1C", "CC(=O)N", "OCCO", "CCCl", "c1ccc(Br)cc1", "CC(C)(C)O",
        "CCOC", "NCCO"]
UNENCODABLE = ["CCI", "C1CC"]  # iodine is not in the vocabulary; an unclosed ring is invalid
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# --- sampling and the whole evaluation -----------------------------------------------------------


def test_sampling_progress_gives_inference_samples(run):
    lines = []
    texts = inference.sample(run, 7, seed=3, batch_size=3, progress=lines.append)
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
    for key in ("valid", "SNN/Test", "SNN/TestSF", "IntDiv", "Filters", "Novelty", "logP", "SA",
                "QED", "weight"):
        assert key in generation, key
    assert generation["weight"] >= 0  # a Wasserstein distance to the test molecules' weights
    assert generation["FCD/Test"] is None and 0 <= generation["valid"] <= 1
    assert results["vae_quality"]["sequences"] == len(TEST)  # the unencodable two left out
    assert results["reconstruction"]["molecules"] == 4
    assert results["references"]["test"] == "list (12 sequences)"
    assert any("2 of the 12 test sequences left out" in n for n in results["notes"])
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
    assert "| QED |" in markdown


def test_evaluate_without_references_skips_and_notes(run):
    results = ev.evaluate(run.run_dir, n_samples=20, include_fcd=False, recon_molecules=0,
                          quality_sequences=0, progress=None)
    generation = results["generation"]
    for key in ("SNN/Test", "Frag/TestSF", "Scaf/Test", "Novelty", "logP", "weight"):
        assert generation[key] is None, key
    assert generation["IntDiv"] is not None
    assert results["vae_quality"] is None and results["reconstruction"] is None
    notes = " | ".join(results["notes"])
    assert "no test set given" in notes and "no test_scaffolds set given" in notes
    assert "Novelty not computed" in notes and "logP, SA, QED, weight" in notes
    assert results["references"] == {"test": None, "test_scaffolds": None, "train": None}


def test_evaluate_with_rejection_reports_what_the_grammar_rejected(run):
    results = ev.evaluate(run.run_dir, n_samples=40, include_fcd=False, recon_molecules=0,
                          quality_sequences=0, rejection=2, progress=None)
    sampling = results["sampling"]
    assert sampling["rejection_rounds"] == 2 and 0 < sampling["masked"] <= sampling["rejected"] <= 1
    with open(os.path.join(results["report_dir"], "report.md")) as handle:
        table = handle.read()
    assert "rejected first draws" in table and "masked after the rounds" in table
    plain = ev.evaluate(run.run_dir, n_samples=10, include_fcd=False, recon_molecules=0,
                        quality_sequences=0, progress=None)
    assert plain["sampling"] == {"rejection_rounds": 0, "rejected": 0.0, "masked": 0.0}


def test_evaluate_notes_a_missing_fcd(run, monkeypatch):
    def missing():
        raise chemnet.MissingExtraError("FCD needs the fcd extra (No module named 'fcd'); "
                                        "pip install fcd")

    monkeypatch.setattr(chemnet, "import_fcd", missing)
    results = ev.evaluate(run.run_dir, n_samples=20, test=TEST, test_scaffolds=TEST,
                          include_fcd=True, recon_molecules=0, quality_sequences=0, progress=None)
    assert results["generation"]["FCD/Test"] is None
    assert results["generation"]["FCD/TestSF"] is None
    assert any(n.startswith("FCD not computed: FCD needs the fcd extra") and "pip install" in n
               for n in results["notes"])


def test_missing_reference_hides_its_fcd_note(run, monkeypatch):
    """Only the given reference's FCD note is kept when FCD runs but yields no statistics."""
    monkeypatch.setattr(chemnet, "import_fcd", lambda: None)
    monkeypatch.setattr(chemnet, "chemnet_statistics", lambda smiles: (None, None))
    notes = []
    values = ev._generation_metrics(inference.sample(run, 20), None, TEST, None, True, None, notes)
    assert values["FCD/Test"] is None and values["SNN/TestSF"] is None
    assert any(n.startswith("FCD/Test not computed") for n in notes)
    assert not any(n.startswith("FCD/TestSF not computed: its") for n in notes)


def test_evaluate_moses_run_uses_the_moses_splits(run, monkeypatch):
    moses_run = dataclasses.replace(run, info={**run.info, "data_source": "moses:train"})
    monkeypatch.setattr(ev, "load_run", lambda run_dir: moses_run)
    splits = {"train": SMILES, "test": TEST, "test_scaffolds": TEST[:4]}
    def read_split(source, column="SMILES"):
        return Sequences(list(splits[source.split(":")[1]]), [], source)

    monkeypatch.setattr(ev, "read_sequences", read_split)
    monkeypatch.setattr(moses_metrics, "read_sequences", read_split)
    monkeypatch.setattr(moses_metrics, "default_reference",
                        lambda split, include_fcd, include_properties, progress:
                        references.reference_stats(splits[split],
                                                      include_properties=include_properties))
    results = ev.evaluate(run.run_dir, n_samples=20, include_fcd=False, iw_samples=2,
                          recon_molecules=2, quality_sequences=4, progress=None)
    assert results["references"] == {"test": "moses:test", "test_scaffolds": "moses:test_scaffolds",
                                      "train": "moses:train"}
    assert results["generation"]["SNN/TestSF"] is not None
    assert results["generation"]["Novelty"] is not None
    assert results["vae_quality"]["sequences"] == 4


def test_property_metrics_from_a_test_file_are_cached_and_equal_the_list_ones(run, tmp_path):
    """With a property head, evaluate reports its R²/MAE on the held-out molecules; given as a
    file, their RDKit values go to RUN/properties/ and are read from there the next time."""
    from seqvae.property_fit import fit_properties

    copy = copy_run(run.run_dir, tmp_path / "run")
    fit_properties(copy, "logp,qed", data=SMILES, limit=0, test=None, epochs=2)
    test_file = tmp_path / "test.smi"
    test_file.write_text("\n".join(TEST + UNENCODABLE) + "\n")
    common = dict(n_samples=5, test_scaffolds=TEST[:6], train=SMILES, include_fcd=False,
                  iw_samples=2, recon_molecules=0, quality_sequences=12, progress=None)
    listed = ev.evaluate(copy, test=TEST + UNENCODABLE, **common)["properties"]
    assert listed["molecules"] == len(TEST) and set(listed) >= {"logp R2", "qed MAE"}
    assert not os.path.exists(os.path.join(copy, "properties"))  # a list is not cached
    from_file = ev.evaluate(copy, test=str(test_file), **common)["properties"]
    assert len(os.listdir(os.path.join(copy, "properties"))) == 1
    assert ev.evaluate(copy, test=str(test_file), **common)["properties"] == from_file
    for key, value in listed.items():
        assert from_file[key] == pytest.approx(value, rel=1e-6), key


def test_prior_hint_only_for_repeating_standard_prior_samples():
    prior_hint = ev.prior_hint
    hint = prior_hint({"unique@1000": 0.99, "unique@10000": 0.865}, "standard", "runs/x")
    assert "86.5%" in hint and "seqvae fit-prior runs/x --components 10" in hint
    assert prior_hint({"unique@1000": 0.9}, "standard", "runs/x") is not None  # < 10k samples
    assert prior_hint({"unique@1000": 0.99, "unique@10000": 0.97}, "standard", "runs/x") is None
    assert prior_hint({"unique@10000": 0.5}, "fitted", "runs/x") is None  # already fitted
    assert prior_hint({"unique@10000": float("nan")}, "standard", "runs/x") is None


def test_evaluate_a_decoder_that_reads_the_grammar(tmp_path):
    """Every part of evaluate on a ``model.grammar_features`` run (the demo's decoder): samples
    by rejection, the likelihood with the teacher-forced grammar state, reconstruction and
    interpolation (earlier: the likelihood stopped on a missing input)."""
    from conftest import tiny_config

    from seqvae.training.loop import train

    config = tiny_config(grammar_features=True, rejection_rounds=2)
    run_dir = str(tmp_path / "features")
    train(dataclasses.replace(config, train=dataclasses.replace(
        config.train, max_steps=10, epochs=5)), run_dir, SMILES)
    results = ev.evaluate(run_dir, n_samples=30, test=TEST, train=SMILES, include_fcd=False,
                          iw_samples=2, recon_molecules=3, quality_sequences=6, progress=None)
    assert results["sampling"]["rejection_rounds"] == 2
    assert results["vae_quality"]["sequences"] == 6 and results["reconstruction"]["molecules"] == 3
    with open(os.path.join(results["report_dir"], "samples.smi")) as handle:
        assert len(handle.read().split("\n")[:-1]) == 30
