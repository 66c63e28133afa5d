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
(``decoding.prior_z``), so a seed draws the same noise under either prior.

With ``components`` K > 1 it fits a mixture of K full-covariance Gaussians instead (Ghosh et al.
fit a 10-component mixture), by expectation-maximisation on the posterior means, each
component's covariance widened by the mean posterior variance of the encodings it holds (the
formula above, weighted by responsibilities; K = 1 is exactly that Gaussian). A sample first
draws its component (from the seed), then ``z = mean_k + L_k eps``.

``fit_aggregate`` keeps the aggregate posterior itself instead of a density fitted to it: an
equal-weight mixture of the N encodings' own posteriors ``N(mu_i, diag((w sigma_i)^2))``, each
widened by ``w`` (``model.prior_widen``; a kernel density estimate whose kernels are the
posteriors). It is what the decoder learned to read, holes and all, where 100 full-covariance
components still leave some. Measured on the demo (``bench/latent_ablation.md``):
z from the posteriors of 50,000 training molecules, sampled by rejection under the grammar, FCD/Test
0.89 at w = 1 against 3.29 for a fitted mixture of 100 and 5.60 for N(0, I); but about one sample
in four is then a training molecule (novelty 0.75: each kernel sits on one); w = 1.4 gives
novelty 0.85 at FCD 1.41. A sample draws its kernel ``i`` uniformly and its noise ``eps`` from
the seed, the rows of one draw taking distinct kernels (two rows on one kernel give a sharp
decoder's molecule twice), in TensorFlow (``decoding.prior_z``, ``aggregate_z``), so the
exported ``sample`` signature draws the same z as seqvae.

Stored as ``RUN_DIR/latent_prior.npz`` (plain arrays, no pickle); a model that ships with seqvae
may store its aggregate posterior's means and scales as float16 (``load`` gives float32).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from seqvae import files
from seqvae.errors import SeqvaeError

FILENAME = "latent_prior.npz"
PRIORS = ("standard", "fitted")
_JITTER = 1e-6  # added to every covariance's diagonal: numerically positive definite


@dataclass(frozen=True)
class FittedPrior:
    """A mixture of K full-covariance Gaussians over z (K = 1: one Gaussian).

    Attributes:
      weights: float64 ``(K,)``, summing to 1.
      means: float64 ``(K, L)``.
      scale_trils: float64 ``(K, L, L)`` lower-triangular, ``L_k @ L_k.T`` = component k's cov.
      sequences: how many encodings it was fitted to.
      source: what they were (e.g. ``moses:train``).
    """

    weights: np.ndarray
    means: np.ndarray
    scale_trils: np.ndarray
    sequences: int
    source: str

    @property
    def components(self) -> int:
        return len(self.weights)

    @property
    def mean(self) -> np.ndarray:
        """The mixture's mean ``(L,)``."""
        return self.weights @ self.means

    @property
    def covariance(self) -> np.ndarray:
        """The mixture's covariance ``(L, L)``."""
        within = np.einsum("k,kij,klj->il", self.weights, self.scale_trils, self.scale_trils)
        centred = self.means - self.mean
        return within + np.einsum("k,ki,kj->ij", self.weights, centred, centred)

    def choose(self, count: int, seed: int = 0) -> np.ndarray:
        """The component of each of ``count`` samples ``(count,)`` int, drawn from ``seed``."""
        if self.components == 1:
            return np.zeros(count, np.int64)
        uniform = np.random.default_rng([int(seed) & 0xFFFFFFFF, 0x5EED]).random(count)
        return np.minimum(np.searchsorted(np.cumsum(self.weights), uniform, side="right"),
                          self.components - 1)

    def transform(self, eps: np.ndarray, seed: int = 0) -> np.ndarray:
        """Standard-normal noise ``(N, L)`` -> samples ``(N, L)`` float32; ``seed`` draws the
        components (unused for one Gaussian)."""
        eps = np.asarray(eps, np.float64)
        component = self.choose(len(eps), seed)
        z = np.empty(eps.shape, np.float32)
        for k in range(self.components):  # a product per component: no (N, L, L) gather
            rows = component == k
            z[rows] = self.means[k] + eps[rows] @ self.scale_trils[k].T
        return z


@dataclass(frozen=True)
class AggregatePrior:
    """The aggregate posterior of N encodings: an equal-weight mixture of diagonal Gaussians.

    Attributes:
      means: float32 ``(N, L)``, the encodings' posterior means.
      scales: float32 ``(N, L)``, their posterior standard deviations times ``widen``.
      widen: the factor the posterior standard deviations were widened by.
      sequences: N.
      source: what was encoded.
    """

    means: np.ndarray
    scales: np.ndarray
    widen: float
    sequences: int
    source: str

    @property
    def components(self) -> int:
        return len(self.means)

    @property
    def mean(self) -> np.ndarray:
        """The mixture's mean ``(L,)``."""
        return self.means.mean(axis=0, dtype=np.float64)

    @property
    def covariance(self) -> np.ndarray:
        """The mixture's covariance ``(L, L)``: that of the means plus the mean kernel variance."""
        centred = self.means.astype(np.float64) - self.mean
        return (centred.T @ centred / len(centred)
                + np.diag((self.scales.astype(np.float64) ** 2).mean(axis=0)))

    def transform(self, eps: np.ndarray, seed: int = 0) -> np.ndarray:
        """Standard-normal noise ``(N, L)`` -> samples ``(N, L)`` float32; ``seed`` draws the
        kernels (``decoding.aggregate_z``, as the exported ``sample`` signature does)."""
        from seqvae.model.decoding import aggregate_z

        return aggregate_z(np.asarray(eps, np.float32), self.means, self.scales, seed).numpy()


def fit(means: np.ndarray, log_vars: np.ndarray, source: str, components: int = 1,
        seed: int = 0, max_iterations: int = 100, tolerance: float = 1e-3) -> FittedPrior:
    """The moment-matched Gaussian, or a K-component mixture fitted by EM, of the aggregate
    posterior of a run's encodings.

    Args:
      means: posterior means ``(N, L)``.
      log_vars: posterior log-variances ``(N, L)``.
      source: what was encoded (kept in the file).
      components: K; 1 gives the moment-matched Gaussian (no EM).
      seed: draws EM's K starting centres (k-means++ seeding).
      max_iterations, tolerance: EM stops after ``max_iterations`` or when the mean
        log-likelihood per encoding gains less than ``tolerance`` nats (scikit-learn's
        ``GaussianMixture`` defaults).

    Raises:
      SeqvaeError: fewer than 2 encodings, or K outside 1..N.
    """
    means = np.asarray(means, np.float64)
    variances = np.exp(np.asarray(log_vars, np.float64))
    if means.ndim != 2 or len(means) < 2:
        raise SeqvaeError(f"fitting a prior needs at least 2 encodings, got {len(means)}")
    if components < 1 or components > len(means):
        raise SeqvaeError(f"a prior of {components} components needs 1 to {len(means)} "
                          f"components (one per encoding at most)")
    if components == 1:
        return _prior(np.ones((len(means), 1)), means, variances, source)
    resp = _initial_responsibilities(means, components, seed)
    previous = -np.inf
    for _ in range(max_iterations):
        prior = _prior(resp, means, variances, source)
        log_joint = _log_joint(prior, means)  # (N, K)
        top = log_joint.max(axis=1, keepdims=True)
        log_total = top[:, 0] + np.log(np.exp(log_joint - top).sum(axis=1))
        resp = np.exp(log_joint - log_total[:, None])
        likelihood = float(log_total.mean())
        if likelihood - previous < tolerance:
            break
        previous = likelihood
    return _prior(resp, means, variances, source)


def fit_aggregate(means: np.ndarray, log_vars: np.ndarray, source: str,
                  widen: float = 1.0) -> AggregatePrior:
    """The aggregate posterior of a run's encodings, each posterior widened by ``widen``.

    Args:
      means: posterior means ``(N, L)``.
      log_vars: posterior log-variances ``(N, L)``.
      source: what was encoded (kept in the file).
      widen: the factor on every posterior standard deviation (> 0; 1 = the posteriors).

    Raises:
      SeqvaeError: no encodings, or ``widen`` not positive.
    """
    means = np.asarray(means, np.float32)
    if means.ndim != 2 or not len(means):
        raise SeqvaeError("the aggregate-posterior prior needs at least one encoding")
    if not widen > 0:
        raise SeqvaeError(f"the prior's widening factor must be > 0, got {widen}")
    scales = (widen * np.exp(0.5 * np.asarray(log_vars, np.float64))).astype(np.float32)
    return AggregatePrior(means, scales, float(widen), len(means), source)


def _prior(resp: np.ndarray, means: np.ndarray, variances: np.ndarray, source: str) -> FittedPrior:
    """The M-step: weights, means and widened covariances from responsibilities ``(N, K)``."""
    counts = resp.sum(axis=0) + 1e-12  # (K,)
    centres = resp.T @ means / counts[:, None]  # (K, L)
    trils = []
    for k in range(resp.shape[1]):
        centred = means - centres[k]
        cov = (resp[:, k, None] * centred).T @ centred / counts[k]
        cov += np.diag(resp[:, k] @ variances / counts[k] + _JITTER)
        trils.append(np.linalg.cholesky(cov))
    return FittedPrior(counts / counts.sum(), centres, np.stack(trils), len(means), source)


def _log_joint(prior: FittedPrior, x: np.ndarray) -> np.ndarray:
    """``log w_k + log N(x_i | mean_k, cov_k)`` ``(N, K)``."""
    out = np.empty((len(x), prior.components))
    for k in range(prior.components):
        tril = prior.scale_trils[k]
        y = (x - prior.means[k]) @ np.linalg.inv(tril).T  # L^-1 (x - mean)
        log_det = 2.0 * np.log(np.diag(tril)).sum()
        out[:, k] = (np.log(prior.weights[k]) - 0.5 * (y * y).sum(axis=1)
                     - 0.5 * (log_det + x.shape[1] * np.log(2.0 * np.pi)))
    return out


def _initial_responsibilities(x: np.ndarray, components: int, seed: int) -> np.ndarray:
    """Hard assignments ``(N, K)`` to the nearest of K centres chosen by k-means++."""
    rng = np.random.default_rng(seed)
    centres = [x[rng.integers(len(x))]]
    nearest = ((x - centres[0]) ** 2).sum(axis=1)
    for _ in range(components - 1):
        centres.append(x[rng.choice(len(x), p=nearest / nearest.sum())])
        nearest = np.minimum(nearest, ((x - centres[-1]) ** 2).sum(axis=1))
    centres = np.stack(centres)
    distances = (centres ** 2).sum(axis=1) - 2.0 * x @ centres.T  # + |x|^2, the same for all
    return np.eye(components)[distances.argmin(axis=1)]


def save(run_dir: str, prior: FittedPrior | AggregatePrior) -> str:
    """Writes ``RUN_DIR/latent_prior.npz`` atomically; returns its path."""
    path = os.path.join(run_dir, FILENAME)
    if isinstance(prior, AggregatePrior):
        arrays = dict(means=prior.means, scales=prior.scales, widen=np.float64(prior.widen))
    else:
        arrays = dict(weights=prior.weights, means=prior.means, scale_trils=prior.scale_trils)
    with files.atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, **arrays, sequences=np.int64(prior.sequences), source=np.str_(prior.source))
    return path


def load(run_dir: str) -> FittedPrior | AggregatePrior:
    """Reads the run's fitted prior (also the one-Gaussian files of earlier versions: ``mean``,
    ``scale_tril``); a one-line error when it has none or it is damaged."""
    path = os.path.join(run_dir, FILENAME)
    if not os.path.exists(path):
        raise SeqvaeError(f"{run_dir}: no fitted prior; run `seqvae fit-prior {run_dir}` first")
    try:
        with np.load(path, allow_pickle=False) as data:
            if "scales" in data:  # float16 in a shipped model (seqvae.pretrained): read as float32
                means, scales = (data[name].astype(np.float32) if data[name].dtype == np.float16
                                 else data[name] for name in ("means", "scales"))
                return _checked_aggregate(path, AggregatePrior(
                    means, scales, float(data["widen"]), int(data["sequences"]),
                    str(data["source"])))
            if "weights" in data:
                weights, means, trils = data["weights"], data["means"], data["scale_trils"]
            else:
                weights, means, trils = np.ones(1), data["mean"][None], data["scale_tril"][None]
            prior = FittedPrior(weights, means, trils, int(data["sequences"]), str(data["source"]))
    except (OSError, ValueError, KeyError) as error:
        raise SeqvaeError(f"{path}: cannot read the fitted prior ({error})") from None
    k, size = prior.means.shape if prior.means.ndim == 2 else (0, 0)
    if (prior.weights.shape != (k,) or prior.scale_trils.shape != (k, size, size) or k < 1
            or not all(np.isfinite(a).all() for a in (prior.weights, prior.means, prior.scale_trils))):
        raise SeqvaeError(f"{path}: damaged fitted prior (shapes {prior.weights.shape}, "
                          f"{prior.means.shape}, {prior.scale_trils.shape})")
    return prior


def _checked_aggregate(path: str, prior: AggregatePrior) -> AggregatePrior:
    """``prior`` when its arrays are whole (float32, matching shapes, finite, scales > 0)."""
    if (prior.means.ndim != 2 or prior.scales.shape != prior.means.shape or not len(prior.means)
            or prior.means.dtype != np.float32 or prior.scales.dtype != np.float32
            or not np.isfinite(prior.means).all() or not (prior.scales > 0).all()
            or not np.isfinite(prior.scales).all()):
        raise SeqvaeError(f"{path}: damaged fitted prior (means {prior.means.shape}, scales "
                          f"{prior.scales.shape})")
    return prior
