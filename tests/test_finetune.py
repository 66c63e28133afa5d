"""seqvae finetune: a trained run carried over to a few dozen new molecules."""

import json
import os

import numpy as np
import pytest
from conftest import HELD_OUT, SMILES

from seqvae import inference, latent_prior
from seqvae.errors import SeqvaeError
from seqvae.finetune import FinetuneSettings, compare_with_base, finetune, planned_steps
from seqvae.run import finetune_files, load_run

WRITABLE = sorted(set(SMILES)) + HELD_OUT  # 30 molecules the tiny run's vocabulary writes
AWKWARD = ["CCO.Cl", "C[C@H](O)CC", "CCP", "C" * 40, "xyz"]  # salt, stereo, P, long, invalid
QUICK = ("train.export_at_end=false",)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("mine") / "mine.smi"
    path.write_text("\n".join(WRITABLE + AWKWARD) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def tuned(run, data, tmp_path_factory):
    """The tiny run fine-tuned on ``data`` at a learning rate too small to move a weight."""
    out = str(tmp_path_factory.mktemp("tuned") / "run")
    settings = FinetuneSettings(min_steps=4, max_steps=4, learning_rate=1e-12, batch_size=8,
                                overrides=QUICK)
    return finetune(run.run_dir, data, out, settings, report=lambda line: None)


def test_it_leaves_out_what_the_base_cannot_write_and_says_why(tuned):
    adapted = tuned["adapted"]
    assert adapted.read == 35 and len(adapted.texts) == 32  # 30, the salt's CCO, CCC(C)O
    assert adapted.stripped == 1 and adapted.without_stereo == 1
    assert {kind: len(rows) for kind, rows in adapted.left_out.items()} == {
        "invalid": 1, "unknown_token": 1, "too_long": 1}
    assert adapted.missing_tokens == {"P": 1} and tuned["added_tokens"] == []


def test_the_run_starts_from_the_base_weights_and_is_a_run_like_any_other(run, tuned):
    tuned_run = load_run(tuned["run_dir"])
    assert tuned_run.vocab == run.vocab and tuned_run.max_len == run.max_len
    for a, b in zip(run.model.weights, tuned_run.model.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)
    texts = inference.sample(tuned_run, 5, seed=1)
    assert len(texts) == 5 and texts == inference.sample(tuned_run, 5, seed=1)


def test_the_held_out_share_is_apart_and_the_prior_is_refitted_to_the_rest(tuned):
    paths = finetune_files(tuned["run_dir"])
    read = {name: open(path).read().split() for name, path in paths.items()}
    assert len(read["molecules"]) == 32 and len(read["held_out"]) == 3  # 10%, rounded
    assert sorted(read["held_out"] + read["fine_tuning"]) == sorted(read["molecules"])
    prior = latent_prior.load(tuned["run_dir"])
    assert prior.sequences == len(read["fine_tuning"])
    record = json.load(open(os.path.join(tuned["run_dir"], "finetune.json")))
    assert record["left_out"] == {"invalid": 1, "unknown_token": 1, "too_long": 1}
    assert record["molecules"] == 32 and os.path.isabs(record["base"])


def test_resuming_a_finished_fine_tuning_trains_nothing_and_other_settings_are_refused(
        run, data, tuned):
    settings = FinetuneSettings(min_steps=4, max_steps=4, learning_rate=1e-12, batch_size=8,
                                overrides=QUICK)
    again = finetune(run.run_dir, data, tuned["run_dir"], settings, resume=True,
                     report=lambda line: None)
    assert again["summary"].get("already_finished")
    with pytest.raises(SeqvaeError, match="already holds a run"):
        finetune(run.run_dir, data, tuned["run_dir"], settings)
    other = FinetuneSettings(min_steps=4, max_steps=4, learning_rate=1e-3, batch_size=8,
                             overrides=QUICK)
    with pytest.raises(SeqvaeError, match="another settings"):
        finetune(run.run_dir, data, tuned["run_dir"], other, resume=True)


def test_extend_vocab_grows_the_vocabulary_and_the_length_and_keeps_stereo(run, data, tmp_path):
    settings = FinetuneSettings(min_steps=3, max_steps=3, batch_size=8, extend_vocab=True,
                                overrides=QUICK)
    result = finetune(run.run_dir, data, str(tmp_path / "grown"), settings,
                      report=lambda line: None)
    adapted = result["adapted"]
    assert list(adapted.left_out) == ["invalid"] and len(adapted.texts) == 34
    assert "P" in result["added_tokens"] and any("@" in t for t in result["added_tokens"])
    grown = load_run(str(tmp_path / "grown"))
    assert grown.vocab.tokens[:len(run.vocab)] == run.vocab.tokens and grown.max_len == 41
    assert len(inference.sample(grown, 4)) == 4


def test_too_few_molecules_is_one_line(run, tmp_path):
    path = tmp_path / "few.smi"
    path.write_text("CCO\nCCN\nCCP\n")
    with pytest.raises(SeqvaeError, match="2 molecules left to train on.*--extend-vocab"):
        finetune(run.run_dir, str(path), str(tmp_path / "out"), report=lambda line: None)


def test_steps_follow_the_set_size_within_their_bounds():
    settings = FinetuneSettings()
    assert planned_steps(settings, 270, 64) == (300, 5)  # a small set: min_steps
    assert planned_steps(settings, 1800, 64) == (580, 29)  # 20 epochs
    assert planned_steps(settings, 100_000, 64) == (1000, 1563)  # max_steps
    with pytest.raises(SeqvaeError, match="holdout"):
        FinetuneSettings(holdout=0.6)


def test_before_and_after_are_scored_against_the_held_out_molecules(tuned, monkeypatch):
    from seqvae.evaluation import comparison as comparison_module

    real = comparison_module.moses_metrics.moses_metrics

    def noted(samples, **options):  # what a run's metrics say of it reaches the comparison
        options["notes"].append("a note on these samples")
        options["notes"].append("FCD/TestSF not computed: its ReferenceStats has no FCD "
                                "statistics")  # the comparison has no TestSF: not said
        return real(samples, **options)

    monkeypatch.setattr(comparison_module.moses_metrics, "moses_metrics", noted)
    comparison = compare_with_base(tuned["run_dir"], n=20, include_fcd=False)
    assert list(comparison["metrics"]) == ["base", "fine-tuned"]
    for values in comparison["metrics"].values():
        assert 0.0 <= values["valid"] <= 1.0 and "Novelty" in values and "unique@1000" in values
    assert comparison["test"] == 3 and comparison["train"] == 29
    assert [n for n in comparison["notes"] if "a note" in n] == [
        "base: a note on these samples", "fine-tuned: a note on these samples"]
    assert not any("TestSF" in n for n in comparison["notes"])


def test_evaluate_defaults_to_the_held_out_and_fine_tuning_molecules(tuned, tmp_path):
    from seqvae.evaluation.evaluate import evaluate

    results = evaluate(tuned["run_dir"], n_samples=20, include_fcd=False, recon_molecules=0,
                       quality_sequences=0, progress=None, report_dir=str(tmp_path / "report"))
    assert "held_out.smi (3 sequences)" in results["references"]["test"]
    assert "fine_tuning.smi (29 sequences)" in results["references"]["train"]
    assert results["report_dir"] == str(tmp_path / "report")
    assert os.path.exists(tmp_path / "report" / "metrics.json")
