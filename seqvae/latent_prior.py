"""A prior fitted to a trained run's aggregate posterior: ex-post density estimation.

A VAE samples ``z ~ N(0, I)``, but what its decoder learned to read is the aggregate posterior
``q(z) = mean_i q(z | x_i)``. With a small KL weight (a latent that carries the molecule) the two
part: regions of N(0, I) that no training molecule encodes to ("holes") decode to unusual
molecules. Ghosh et al. 2020 (*From variational to deterministic autoencoders*) sample instead
from a density fitted to the encodings after training. seqvae fits the Gaussian that matches
the first two moments of ``q(z)`` (for diagonal posteriors ``N(mu_i, diag(sigma_i^2))``):

    mean = mean_i mu_i
    cov  = cov_i(mu_i) + diag(mean_i sigma_i^2)

and samples ``z = mean + L eps`` with ``L L^T = cov`` and the same ``eps`` as the standard prior
(``decoding.prior_z``), so a seed draws the same noise under either prior. It is stored as
``RUN_DIR/latent_prior.npz`` (plain arrays, no pickle).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from seqvae import files
from seqvae.errors import SeqvaeError

FILENAME = "latent_prior.npz"
PRIORS = ("standard", "fitted")


@dataclass(frozen=True)
class FittedPrior:
    """A full-covariance Gaussian over z.

    Attributes:
      mean: float64 ``(L,)``.
      scale_tril: float64 ``(L, L)`` lower-triangular, ``scale_tril @ scale_tril.T`` = cov.
      sequences: how many encodings it was fitted to.
      source: what they were (e.g. ``moses:train``).
    """

    mean: np.ndarray
    scale_tril: np.ndarray
    sequences: int
    source: str

    def transform(self, eps: np.ndarray) -> np.ndarray:
        """Standard-normal noise ``(N, L)`` -> samples ``(N, L)`` float32."""
        return (self.mean + eps.astype(np.float64) @ self.scale_tril.T).astype(np.float32)


def fit(means: np.ndarray, log_vars: np.ndarray, source: str) -> FittedPrior:
    """The moment-matched Gaussian of the aggregate posterior of encodings ``(N, L)``."""
    means = np.asarray(means, np.float64)
    if means.ndim != 2 or len(means) < 2:
        raise SeqvaeError(f"fitting a prior needs at least 2 encodings, got {len(means)}")
    cov = np.cov(means, rowvar=False) + np.diag(np.exp(np.asarray(log_vars, np.float64)).mean(0))
    cov += 1e-6 * np.eye(len(cov))  # numerically positive definite
    return FittedPrior(means.mean(0), np.linalg.cholesky(cov), len(means), source)


def save(run_dir: str, prior: FittedPrior) -> str:
    """Writes ``RUN_DIR/latent_prior.npz`` atomically; returns its path."""
    path = os.path.join(run_dir, FILENAME)
    with files.atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, mean=prior.mean, scale_tril=prior.scale_tril,
                 sequences=np.int64(prior.sequences), source=np.str_(prior.source))
    return path


def load(run_dir: str) -> FittedPrior:
    """Reads the run's fitted prior; a one-line error when it has none or it is damaged."""
    path = os.path.join(run_dir, FILENAME)
    if not os.path.exists(path):
        raise SeqvaeError(f"{run_dir}: no fitted prior; run `seqvae fit-prior {run_dir}` first")
    try:
        with np.load(path, allow_pickle=False) as data:
            prior = FittedPrior(data["mean"], data["scale_tril"], int(data["sequences"]),
                                str(data["source"]))
    except (OSError, ValueError, KeyError) as error:
        raise SeqvaeError(f"{path}: cannot read the fitted prior ({error})") from None
    size = len(prior.mean)
    if prior.scale_tril.shape != (size, size) or not np.isfinite(prior.scale_tril).all():
        raise SeqvaeError(f"{path}: damaged fitted prior (shapes {prior.mean.shape}, "
                          f"{prior.scale_tril.shape})")
    return prior
