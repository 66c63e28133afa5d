"""The run's prior over z: which one a run samples, drawing from it, and fitting one to encodings."""

from __future__ import annotations

import os

import numpy as np

from seqvae import latent_prior
from seqvae.data import sources
from seqvae.errors import SeqvaeError
from seqvae.inference.compiled import cached
from seqvae.inference.encoding import encode_writable
from seqvae.model import decoding
from seqvae.run import Run


def run_prior(run: Run, prior: str | None = None) -> str:
    """``prior`` as given, or for None the run's own: ``fitted`` for a run trained with
    ``model.prior=aggregate`` (its prior is the aggregate posterior kept after training),
    ``standard`` otherwise."""
    if prior is None:
        return "fitted" if run.config.model.prior == "aggregate" else "standard"
    return prior


def loaded_prior(run: Run):
    """The run's fitted prior (``latent_prior.load``), read once per version of its file: the
    aggregate posterior is 25 MB, and a command draws from it many times (every rejection
    round, every explorer request); ``seqvae fit-prior`` replacing the file is read anew."""
    path = os.path.join(run.run_dir, latent_prior.FILENAME)
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return latent_prior.load(run.run_dir)  # its one-line error
    version = ("latent_prior", stat.st_ino, stat.st_mtime_ns, stat.st_size)
    for old in [k for k in run.compiled if k[1:2] == version[:1] and k[1:] != version]:
        del run.compiled[old]  # an earlier version of the file
    return cached(run, version, lambda: latent_prior.load(run.run_dir))


def describe_prior(run: Run, prior: str | None = None) -> str:
    """Where ``prior`` (None: the run's own) draws z, in words: "N(0, I)", or what the run's
    fitted prior is."""
    if run_prior(run, prior) != "fitted":
        return "N(0, I)"
    fitted = loaded_prior(run)
    if isinstance(fitted, latent_prior.AggregatePrior):
        return (f"the aggregate posterior of {fitted.sequences:,} training encodings, each "
                f"widened {fitted.widen:g}x")
    return f"a fitted mixture of {fitted.components} Gaussian(s)"


def prior_draw(run: Run, num: int, seed, prior: str | None = None,
               widen: float = 1.0) -> np.ndarray:
    """``num`` latent vectors float32 ``(num, latent_dim)`` from the standard or the fitted
    prior (None: the run's own, ``run_prior``), the same for a seed; ``widen`` multiplies the
    fitted prior's kernels' (or components') spread, and leaves N(0, I) as it is."""
    prior = run_prior(run, prior)
    z = decoding.prior_z(num, run.config.model.latent_dim, seed).numpy()
    if prior == "fitted" and run.config.model.prior == "aggregate" and not os.path.exists(
            os.path.join(run.run_dir, latent_prior.FILENAME)):
        raise SeqvaeError(f"{run.run_dir}: its prior (model.prior=aggregate) is kept when "
                          f"training ends, and this run has not ended: finish it with 'seqvae "
                          f"train --resume --out {run.run_dir}', or keep it now with 'seqvae "
                          f"fit-prior {run.run_dir} --aggregate' (or sample --prior standard)")
    if prior == "fitted":
        return loaded_prior(run).transform(widen * z, seed)
    if prior != "standard":
        raise SeqvaeError(f"prior must be one of {', '.join(latent_prior.PRIORS)}, got {prior!r}")
    return z


def fit_prior(run: Run, data="moses:train", limit: int = 50_000, batch_size: int = 1000,
              components: int = 1, aggregate: bool = False, widen: float | None = None):
    """Fits ``seqvae.latent_prior`` (a Gaussian, or a mixture of ``components``; with
    ``aggregate`` the aggregate posterior itself, each posterior widened by ``widen``, None =
    the run's ``model.prior_widen``) to the encodings of ``limit`` sequences of ``data`` (the
    run's training source by default) drawn at random (seeded; 0 = all of them: a file in some
    order, MOSES's among them, is not described by its first lines) and saves it in the run
    directory. Returns the ``FittedPrior`` or ``AggregatePrior``."""
    run.check_writable("seqvae fit-prior")
    mean, log_var, source = prior_encodings(run, data, limit, batch_size)
    if aggregate:
        prior = latent_prior.fit_aggregate(mean, log_var, source, run.config.model.prior_widen
                                           if widen is None else widen)
    else:
        prior = latent_prior.fit(mean, log_var, source, components=components)
    latent_prior.save(run.run_dir, prior)
    return prior


def prior_encodings(run: Run, data="moses:train", limit: int = 50_000, batch_size: int = 1000
                    ) -> tuple[np.ndarray, np.ndarray, str]:
    """``(mean (N, L), log_var (N, L), source)``: the posteriors of ``limit`` sequences of
    ``data`` drawn at random (0: all), what ``fit_prior`` fits a prior to.

    Raises:
      SeqvaeError: no sequence of ``data`` can be encoded.
    """
    seqs = sources.read_sequences(data, run.config.data.column)
    if limit:
        seqs = sources.random_subset(seqs, limit, seed=0)
    kept, mean, log_var = encode_writable(run, seqs.texts, batch_size, source=seqs.source)
    if not len(kept):
        raise SeqvaeError(f"{seqs.source}: nothing to fit the prior to (no line can be encoded)")
    return mean, log_var, seqs.source
