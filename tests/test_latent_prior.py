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
