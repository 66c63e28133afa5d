"""The fitted prior: moments of the aggregate posterior, file round trip, sampling through it."""

import numpy as np
import pytest
from conftest import SMILES

from seqvae import inference, latent_prior
from seqvae.cli import main
from seqvae.errors import SeqvaeError


def test_fit_matches_the_aggregate_posterior_moments():
    rng = np.random.default_rng(0)
    means = rng.normal([1.0, -2.0, 0.5], [0.5, 2.0, 1.0], size=(20000, 3))
    log_vars = np.log(np.full((20000, 3), [0.25, 1.0, 4.0]))
    prior = latent_prior.fit(means, log_vars, "test")
    assert prior.components == 1
    cov = prior.scale_trils[0] @ prior.scale_trils[0].T
    np.testing.assert_allclose(prior.covariance, cov)
    # Var of the mixture = variance of the means + mean of the variances.
    np.testing.assert_allclose(np.diag(cov), [0.25 + 0.25, 4.0 + 1.0, 1.0 + 4.0], rtol=0.05)
    np.testing.assert_allclose(prior.mean, [1.0, -2.0, 0.5], atol=0.05)
    z = prior.transform(rng.standard_normal((50000, 3)))
    np.testing.assert_allclose(np.cov(z, rowvar=False), cov, atol=0.1)
    with pytest.raises(SeqvaeError):
        latent_prior.fit(means[:1], log_vars[:1], "test")


def test_a_mixture_recovers_separated_clusters_and_samples_them():
    """Two clusters (weights 0.3 / 0.7) of posterior means with known covariances and posterior
    variances: EM finds the weights, centres and widened covariances, and the samples have
    the mixture's moments. By hand: component k's covariance is the covariance of its means
    plus the mean posterior variance of its encodings."""
    rng = np.random.default_rng(1)
    a = rng.multivariate_normal([-4.0, 0.0], [[1.0, 0.6], [0.6, 1.0]], size=6000)
    b = rng.multivariate_normal([4.0, 2.0], [[0.25, 0.0], [0.0, 2.25]], size=14000)
    means = np.concatenate([a, b])
    log_vars = np.log(np.concatenate([np.full((6000, 2), 0.04), np.full((14000, 2), 0.09)]))
    prior = latent_prior.fit(means, log_vars, "test", components=2, seed=3)
    order = np.argsort(prior.means[:, 0])  # component of cluster a first
    np.testing.assert_allclose(prior.weights[order], [0.3, 0.7], atol=0.01)
    np.testing.assert_allclose(prior.means[order], [[-4.0, 0.0], [4.0, 2.0]], atol=0.06)
    covs = np.einsum("kij,klj->kil", prior.scale_trils, prior.scale_trils)[order]
    np.testing.assert_allclose(covs[0], [[1.04, 0.6], [0.6, 1.04]], atol=0.08)
    np.testing.assert_allclose(covs[1], [[0.34, 0.0], [0.0, 2.34]], atol=0.1)
    single = latent_prior.fit(means, log_vars, "test")
    np.testing.assert_allclose(prior.mean, single.mean, atol=1e-6)  # the same first moments
    np.testing.assert_allclose(prior.covariance, single.covariance, rtol=0.02, atol=0.02)
    eps = rng.standard_normal((40000, 2))
    z = prior.transform(eps, seed=5)
    assert z.dtype == np.float32
    np.testing.assert_array_equal(z, prior.transform(eps, seed=5))  # seeded
    assert not np.array_equal(z, prior.transform(eps, seed=6))
    np.testing.assert_allclose((z[:, 0] < 0).mean(), 0.3, atol=0.01)  # the weights
    np.testing.assert_allclose(np.cov(z, rowvar=False), prior.covariance, atol=0.1)
    with pytest.raises(SeqvaeError, match="components"):
        latent_prior.fit(means[:3], log_vars[:3], "test", components=4)


def test_a_mixture_round_trips_and_one_gaussian_files_of_earlier_versions_load(tmp_path):
    rng = np.random.default_rng(2)
    means = np.concatenate([rng.normal(-3, 1, (500, 3)), rng.normal(3, 1, (500, 3))])
    prior = latent_prior.fit(means, np.zeros_like(means), "x", components=3)
    latent_prior.save(str(tmp_path), prior)
    loaded = latent_prior.load(str(tmp_path))
    assert loaded.components == 3 and loaded.source == "x" and loaded.sequences == 1000
    for name in ("weights", "means", "scale_trils"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(prior, name))
    old = latent_prior.fit(means, np.zeros_like(means), "y")
    np.savez(tmp_path / latent_prior.FILENAME, mean=old.mean, scale_tril=old.scale_trils[0],
             sequences=np.int64(1000), source=np.str_("y"))
    eps = rng.standard_normal((4, 3))
    np.testing.assert_allclose(latent_prior.load(str(tmp_path)).transform(eps),
                               old.mean + eps @ old.scale_trils[0].T, rtol=1e-6)
    np.savez(tmp_path / latent_prior.FILENAME, weights=np.ones(2), means=np.zeros((2, 3)),
             scale_trils=np.zeros((2, 3, 2)), sequences=np.int64(1), source=np.str_("z"))
    with pytest.raises(SeqvaeError, match="damaged fitted prior"):
        latent_prior.load(str(tmp_path))


def test_fitted_prior_round_trip_and_sampling(run, tmp_path, capsys):
    with pytest.raises(SeqvaeError, match="fit-prior"):
        inference.sample(run, 4, prior="fitted")
    prior = inference.fit_prior(run, SMILES)
    loaded = latent_prior.load(run.run_dir)
    np.testing.assert_array_equal(loaded.scale_trils, prior.scale_trils)
    assert loaded.sequences == len(SMILES) and loaded.source == "list"
    fitted = inference.sample(run, 6, seed=3, prior="fitted")
    assert fitted == inference.sample(run, 6, seed=3, prior="fitted")  # seeded
    assert len(fitted) == 6
    with pytest.raises(SeqvaeError, match="prior must be"):
        inference.sample(run, 2, prior="other")
    assert inference.loaded_prior(run) is inference.loaded_prior(run)  # read once
    inference.fit_prior(run, SMILES, components=2)  # a new file is read anew
    assert inference.loaded_prior(run).components == 2

    data = tmp_path / "mols.smi"
    data.write_text("\n".join(SMILES[:10]) + "\n")
    assert main(["fit-prior", run.run_dir]) == 2  # trained on a list: DATA must be given
    assert "give DATA" in capsys.readouterr().err
    assert main(["fit-prior", run.run_dir, str(data)]) == 0
    assert "fitted a Gaussian to 10 encodings" in capsys.readouterr().err
    assert main(["sample", run.run_dir, "--prior", "fitted", "-n", "3"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["fit-prior", run.run_dir, str(data), "--components", "2"]) == 0
    assert "fitted a mixture of 2 Gaussians (weights" in capsys.readouterr().err
    assert latent_prior.load(run.run_dir).components == 2
    assert main(["sample", run.run_dir, "--prior", "fitted", "-n", "3"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3

    with open(f"{run.run_dir}/latent_prior.npz", "wb") as handle:
        handle.write(b"not a npz")
    with pytest.raises(SeqvaeError, match="cannot read the fitted prior"):
        latent_prior.load(run.run_dir)


def test_the_aggregate_prior_keeps_each_posterior_widened_and_draws_kernels_uniformly():
    """By hand: kernel i is N(mu_i, diag((w sigma_i)^2)); a sample picks its kernel uniformly
    (from the seed) and adds the kernel's scales times the noise; the mixture's covariance is
    that of the means plus the mean kernel variance."""
    means = np.array([[0.0, 0.0], [10.0, -10.0], [-5.0, 5.0]], np.float32)
    log_vars = np.log(np.array([[0.25, 1.0], [4.0, 0.01], [1.0, 1.0]]))
    prior = latent_prior.fit_aggregate(means, log_vars, "x", widen=2.0)
    np.testing.assert_allclose(prior.scales, [[1.0, 2.0], [4.0, 0.2], [2.0, 2.0]], rtol=1e-6)
    assert prior.components == 3 and prior.sequences == 3 and prior.widen == 2.0
    np.testing.assert_allclose(prior.mean, [5 / 3, -5 / 3])
    centred = means - means.mean(axis=0)
    np.testing.assert_allclose(prior.covariance, centred.T @ centred / 3 + np.diag(
        [(1 + 16 + 4) / 3, (4 + 0.04 + 4) / 3]), rtol=1e-5)
    eps = np.random.default_rng(0).standard_normal((30000, 2)).astype(np.float32)
    z = prior.transform(eps, seed=4)
    assert z.dtype == np.float32 and z.shape == (30000, 2)
    np.testing.assert_array_equal(z, prior.transform(eps, seed=4))

    def kernels(z):  # the kernel each row came from, and how far it is from being exact
        gap = np.abs(z[:, None, :] - means[None] - prior.scales[None] * eps[:, None, :]).sum(-1)
        return gap.argmin(axis=1), gap.min(axis=1)

    chosen, gap = kernels(z)
    np.testing.assert_allclose(gap, 0.0, atol=1e-5)
    np.testing.assert_allclose(np.bincount(chosen) / len(z), [1 / 3] * 3, atol=0.01)
    assert (kernels(prior.transform(eps, seed=5))[0] != chosen).mean() > 0.5  # another seed
    np.testing.assert_allclose(np.cov(z, rowvar=False), prior.covariance, rtol=0.05)
    with pytest.raises(SeqvaeError, match="widening"):
        latent_prior.fit_aggregate(means, log_vars, "x", widen=0.0)
    with pytest.raises(SeqvaeError, match="at least one"):
        latent_prior.fit_aggregate(means[:0], log_vars[:0], "x")


def test_the_rows_of_one_draw_take_distinct_kernels():
    """K kernels, K rows: each kernel exactly once (drawn independently, 1,000 rows from 1,000
    kernels would leave about 368 unused); row j + K takes row j's kernel; the order is the
    seed's."""
    from seqvae.model.decoding import aggregate_z

    means = np.arange(1000, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    scales = np.ones_like(means)
    zero = np.zeros((2500, 3), np.float32)
    chosen = aggregate_z(zero, means, scales, 7).numpy()[:, 0].astype(int)
    assert sorted(chosen[:1000]) == list(range(1000))
    np.testing.assert_array_equal(chosen[1000:2000], chosen[:1000])
    np.testing.assert_array_equal(chosen[2000:], chosen[:500])
    again = aggregate_z(zero[:10], means, scales, 7).numpy()[:, 0].astype(int)
    np.testing.assert_array_equal(again, chosen[:10])  # a shorter draw: the same first rows
    other = aggregate_z(zero, means, scales, 8).numpy()[:1000, 0].astype(int)
    assert sorted(other) == list(range(1000)) and (other != chosen[:1000]).mean() > 0.9
    noise = np.full((5, 3), 0.5, np.float32)
    np.testing.assert_allclose(aggregate_z(noise, means, 2 * scales, 7).numpy(),
                               means[chosen[:5]] + 1.0)


def test_the_aggregate_prior_round_trips_and_a_damaged_one_is_named(tmp_path):
    rng = np.random.default_rng(3)
    prior = latent_prior.fit_aggregate(rng.normal(size=(50, 4)), rng.normal(size=(50, 4)), "y", 1.4)
    latent_prior.save(str(tmp_path), prior)
    loaded = latent_prior.load(str(tmp_path))
    assert isinstance(loaded, latent_prior.AggregatePrior)
    assert (loaded.widen, loaded.sequences, loaded.source) == (1.4, 50, "y")
    np.testing.assert_array_equal(loaded.means, prior.means)
    np.testing.assert_array_equal(loaded.scales, prior.scales)
    np.savez(tmp_path / latent_prior.FILENAME, means=prior.means, scales=-prior.scales,
             widen=1.4, sequences=np.int64(50), source=np.str_("y"))
    with pytest.raises(SeqvaeError, match="damaged fitted prior"):
        latent_prior.load(str(tmp_path))


def test_a_run_trained_with_the_aggregate_prior_keeps_it_and_samples_it(tmp_path, capsys):
    """model.prior=aggregate: training ends by encoding min(prior_encodings, training rows)
    training sequences; sample, evaluate's sampling and the explorer then draw z from it unless
    told otherwise, and a standard run keeps N(0, I)."""
    import dataclasses

    from conftest import tiny_config, with_train

    from seqvae.workflows import train
    from seqvae.run import load_run

    config = with_train(tiny_config(prior="aggregate", prior_encodings=12, prior_widen=1.5),
                        max_steps=6, epochs=100)
    train(config, str(tmp_path / "run"), data=SMILES)
    assert "prior: the aggregate posterior of 12 training sequences" in capsys.readouterr().err
    run = load_run(str(tmp_path / "run"))
    prior = latent_prior.load(run.run_dir)
    assert isinstance(prior, latent_prior.AggregatePrior) and prior.sequences == 12
    mean, log_var = inference.encode(run, SMILES)  # the kernels are training rows' posteriors
    for centre, scale in zip(prior.means, prior.scales):
        row = np.abs(mean - centre).sum(axis=1).argmin()
        np.testing.assert_allclose(centre, mean[row], atol=1e-5)
        np.testing.assert_allclose(scale, 1.5 * np.exp(0.5 * log_var[row]), rtol=1e-4)
    assert inference.run_prior(run) == "fitted"
    np.testing.assert_array_equal(inference.prior_draw(run, 5, 2),
                                  inference.prior_draw(run, 5, 2, "fitted"))
    assert not np.array_equal(inference.prior_draw(run, 5, 2),
                              inference.prior_draw(run, 5, 2, "standard"))
    centres = inference.prior_draw(run, 5, 2, widen=0.0)  # the same kernels, each at its mean
    assert {tuple(row) for row in centres} <= {tuple(row) for row in prior.means}
    np.testing.assert_allclose(inference.prior_draw(run, 5, 2, widen=1.6) - centres,
                               1.6 * (inference.prior_draw(run, 5, 2) - centres), atol=1e-5)
    np.testing.assert_array_equal(inference.prior_draw(run, 5, 2, "standard", widen=1.6),
                                  inference.prior_draw(run, 5, 2, "standard"))
    assert inference.sample(run, 8, seed=1) == inference.sample(run, 8, seed=1, prior="fitted")
    plain = dataclasses.replace(run, config=dataclasses.replace(
        run.config, model=dataclasses.replace(run.config.model, prior="standard")))
    assert inference.run_prior(plain) == "standard"
    # finishing again refits a lost prior
    import os

    os.remove(os.path.join(run.run_dir, latent_prior.FILENAME))
    with pytest.raises(SeqvaeError, match="kept when training ends.*--resume.*--aggregate"):
        inference.sample(run, 2)
    assert len(inference.sample(run, 2, prior="standard")) == 2
    train(config, run.run_dir, data=SMILES, resume=True)
    assert latent_prior.load(run.run_dir).sequences == 12


def test_fit_prior_aggregate_from_the_command_line(run, tmp_path, capsys):
    data = tmp_path / "mols.smi"
    data.write_text("\n".join(SMILES[:10]) + "\n")
    assert main(["fit-prior", run.run_dir, str(data), "--aggregate", "--widen", "1.2"]) == 0
    assert ("fitted the aggregate posterior (each q(z|x) widened 1.2x) to 10 encodings"
            in capsys.readouterr().err)
    prior = latent_prior.load(run.run_dir)
    assert isinstance(prior, latent_prior.AggregatePrior) and prior.widen == 1.2
    assert main(["sample", run.run_dir, "--prior", "fitted", "-n", "3"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
