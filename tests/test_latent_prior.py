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
    cov = prior.scale_tril @ prior.scale_tril.T
    # Var of the mixture = variance of the means + mean of the variances.
    np.testing.assert_allclose(np.diag(cov), [0.25 + 0.25, 4.0 + 1.0, 1.0 + 4.0], rtol=0.05)
    np.testing.assert_allclose(prior.mean, [1.0, -2.0, 0.5], atol=0.05)
    z = prior.transform(rng.standard_normal((50000, 3)))
    np.testing.assert_allclose(np.cov(z, rowvar=False), cov, atol=0.1)
    with pytest.raises(SeqvaeError):
        latent_prior.fit(means[:1], log_vars[:1], "test")


def test_fitted_prior_round_trip_and_sampling(run, tmp_path, capsys):
    with pytest.raises(SeqvaeError, match="fit-prior"):
        inference.sample(run, 4, prior="fitted")
    prior = inference.fit_prior(run, SMILES)
    loaded = latent_prior.load(run.run_dir)
    np.testing.assert_array_equal(loaded.scale_tril, prior.scale_tril)
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
    assert "fitted the prior to 10 encodings" in capsys.readouterr().err
    assert main(["sample", run.run_dir, "--prior", "fitted", "-n", "3"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3

    with open(f"{run.run_dir}/latent_prior.npz", "wb") as handle:
        handle.write(b"not a npz")
    with pytest.raises(SeqvaeError, match="cannot read the fitted prior"):
        latent_prior.load(run.run_dir)
