"""seqvae train --init RUN: a new run that starts from another run's weights."""

import json
import os

import numpy as np
import pytest
from conftest import SMILES, run_weights
from test_cli_errors import cli, user_error, write_smi

from seqvae import warm_start
from seqvae.errors import SeqvaeError
from seqvae.run import load_run

QUICK = ["--set", "train.export_at_end=false", "--set", "train.log_every=1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_smi(tmp_path_factory.mktemp("data") / "train.smi", SMILES)


def first_loss(run_dir) -> float:
    with open(os.path.join(run_dir, "metrics.jsonl")) as handle:
        steps = [json.loads(line) for line in handle if '"kind": "step"' in line]
    return steps[0]["loss"]


def test_init_sets_the_base_weights_and_records_the_base(tiny_run_dir, tmp_path):
    base = load_run(tiny_run_dir)
    out = str(tmp_path / "new")
    codec, init = warm_start.warm_start(tiny_run_dir, base.config, out)
    fresh = load_run(tiny_run_dir)  # a second model of the same config
    for weight in fresh.model.weights:
        weight.assign(np.zeros(weight.shape, weight.dtype))
    init(fresh.model)
    for ours, theirs in zip(run_weights(tiny_run_dir), [w.numpy() for w in fresh.model.weights]):
        np.testing.assert_array_equal(ours, theirs)
    assert codec.vocab.tokens == base.codec.vocab.tokens
    record = json.load(open(os.path.join(out, warm_start.INIT_FILE)))
    assert record["init"] == os.path.abspath(tiny_run_dir) and record["weights_checksum"]


def test_a_run_started_from_a_trained_one_starts_where_it_ended(tiny_run_dir, data, tmp_path):
    code, out, err = cli(["train", data, "--out", tmp_path / "fresh", "--max-steps", 2,
                          "--config", os.path.join(tiny_run_dir, "config.json"), *QUICK])
    assert code == 0, err
    code, out, err = cli(["train", data, "--out", tmp_path / "warm", "--init", tiny_run_dir,
                          "--max-steps", 2, *QUICK, "--set", "train.kl_weight_end=0.3"])
    assert code == 0, err
    assert first_loss(tmp_path / "warm") < 0.9 * first_loss(tmp_path / "fresh")
    warm = load_run(str(tmp_path / "warm"))
    assert warm.config.train.kl_weight_end == 0.3  # --set applies to the base's config
    assert warm.config.model == load_run(tiny_run_dir).config.model
    # resumed: nothing left to train, the same base accepted
    code, out, err = cli(["train", data, "--out", tmp_path / "warm", "--init", tiny_run_dir,
                          "--resume", "--max-steps", 2, *QUICK,
                          "--set", "train.kl_weight_end=0.3"])
    assert code == 0, err


def test_a_model_that_differs_or_another_base_is_one_line(tiny_run_dir, data, tmp_path):
    user_error(["train", data, "--out", tmp_path / "wider", "--init", tiny_run_dir,
                "--set", "model.decoder_units=32", *QUICK],
               "--init", "model.decoder_units 16 -> 32")
    out = tmp_path / "other"
    os.makedirs(out)
    (out / warm_start.INIT_FILE).write_text(json.dumps({"init": "/elsewhere",
                                                        "weights_checksum": "0"}))
    with pytest.raises(SeqvaeError, match="started from /elsewhere"):
        warm_start.warm_start(tiny_run_dir, load_run(tiny_run_dir).config, str(out))


def test_sampling_fields_may_differ():
    from conftest import tiny_config
    import dataclasses

    model = tiny_config().model
    assert warm_start.weight_differences(model, dataclasses.replace(
        model, prior="aggregate", prior_widen=1.3, rejection_rounds=8)) == []
    assert warm_start.weight_differences(model, dataclasses.replace(model, latent_dim=8)) == [
        "model.latent_dim 4 -> 8"]
