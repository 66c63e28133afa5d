"""Tests for seqvae.evaluation.vae_quality on a tiny run (20 steps, seconds)."""

import math

import numpy as np
import pytest
from conftest import HELD_OUT as TEST

from seqvae.errors import SeqvaeError
from seqvae.evaluation import vae_quality

# --- vae_quality ---------------------------------------------------------------------------------


def test_vae_quality_values_and_bounds(run):
    quality = vae_quality.vae_quality(run, TEST, iw_samples=10, batch_size=4)
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
    # standard errors over sequences: positive for 10 different sequences, 0 for one
    assert 0 < quality["nll_iw_se"] < abs(quality["nll_iw"]) and quality["elbo_se"] > 0
    single = vae_quality.vae_quality(run, TEST[:1], iw_samples=3)
    assert single["nll_iw_se"] == single["elbo_se"] == 0.0


def test_vae_quality_is_seeded(run):
    first = vae_quality.vae_quality(run, TEST, iw_samples=3, seed=1)
    assert vae_quality.vae_quality(run, TEST, iw_samples=3, seed=1) == first
    assert vae_quality.vae_quality(run, TEST, iw_samples=3, seed=2)["nll_iw"] != first["nll_iw"]


def test_vae_quality_needs_a_sample(run):
    with pytest.raises(SeqvaeError, match="iw_samples"):
        vae_quality.vae_quality(run, TEST, iw_samples=0)


def test_mutual_information_of_identical_and_of_separated_posteriors():
    batch, dims = 5, 3
    log_var = np.full((batch, dims), np.log(0.25))
    # z = mean + std: each draw sits exactly one standard deviation out in every dimension,
    # so E_q[log q(z|x)] matches its closed form and the estimate is exact.
    same = np.ones((batch, dims))
    assert vae_quality._batch_mutual_information(same, log_var, same + 0.5) == pytest.approx(0.0, abs=1e-12)
    apart = 100.0 * np.arange(batch)[:, None] * np.ones((1, dims))  # posteriors far from each other
    separated = vae_quality._batch_mutual_information(apart, log_var, apart + 0.5)
    assert separated == pytest.approx(math.log(batch))


# --- reconstruction ------------------------------------------------------------------------------


def test_vae_quality_of_a_decoder_that_reads_the_grammar(tmp_path):
    """A ``model.grammar_features`` run's likelihood reads the grammar's state under teacher
    forcing, as its training did (evaluate stopped on it with a missing input before)."""
    import dataclasses

    import tensorflow as tf
    from conftest import SMILES, tiny_config

    from seqvae.training.loop import train
    from seqvae.run import load_run

    config = tiny_config(grammar_features=True)
    run_dir = str(tmp_path / "features")
    train(dataclasses.replace(config, train=dataclasses.replace(
        config.train, max_steps=10, epochs=5)), run_dir, SMILES)
    run = load_run(run_dir)
    quality = vae_quality.vae_quality(run, TEST, iw_samples=3, batch_size=4)
    assert math.isfinite(quality["nll_iw"]) and quality["recon"] > 0
    # The feature rows of the first layer's kernel zeroed: another likelihood, so it read them.
    kernel, rows = run.model.decoder.grus[0].kernel, run.model.decoder.feature_dim
    kernel.assign(tf.concat([kernel[:-rows], tf.zeros_like(kernel[-rows:])], axis=0))
    ignored = vae_quality.vae_quality(run, TEST, iw_samples=3, batch_size=4)
    assert ignored["recon"] != quality["recon"]
