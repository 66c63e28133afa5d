"""The VAE itself on held-out sequences: ELBO and its terms, an importance-weighted NLL bound,
KL per latent dimension, active units and the mutual information between x and z.

Every likelihood here is in nats per sequence (the sum over real tokens, ``<eos>`` included),
unlike the training log's ``recon``, which is a mean per token.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from seqvae import inference
from seqvae.data.vocabulary import PAD_ID
from seqvae.errors import SeqvaeError
from seqvae.model import likelihood, randomness
from seqvae.run import Run

ACTIVE_UNIT_THRESHOLD = 0.01  # Burda et al. 2016: a unit is active if Var_x(E[z_d | x]) > 0.01


_LOG_2PI = math.log(2.0 * math.pi)


def standard_error(values: np.ndarray) -> float:
    """The standard error of the mean of ``values`` (one per sequence or molecule); 0 for one."""
    return float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0


def _batch_mutual_information(mean: np.ndarray, log_var: np.ndarray, z: np.ndarray) -> float:
    """He et al. 2019's estimate of I(x; z) on one batch, float64 ``(B, L)`` inputs.

    ``E_x E_q(z|x)[log q(z|x)] - E_q(z)[log q(z)]``, which equals
    ``E_x[KL(q(z|x) || p(z))] - KL(q(z) || p(z))``, with the aggregate posterior
    ``q(z) ~= 1/B sum_j q(z | x_j)`` over the batch and one ``z_i ~ q(z | x_i)`` per sequence.
    It lies in ``[0, log B]`` up to Monte Carlo error.
    """
    batch, dims = mean.shape
    neg_entropy = np.mean(-0.5 * np.sum(1.0 + log_var + _LOG_2PI, axis=1))
    precision = np.exp(-log_var)  # (B, L)
    # sum_d (z_id - mu_jd)^2 / var_jd as three matrix products instead of a (B, B, L) tensor
    squared = (z**2) @ precision.T - 2.0 * z @ (mean * precision).T + np.sum(mean**2 * precision, 1)
    log_density = -0.5 * (squared + np.sum(log_var, 1) + dims * _LOG_2PI)  # (B_z, B_x)
    log_aggregate = tf.reduce_logsumexp(log_density, axis=1).numpy() - math.log(batch)
    return float(neg_entropy - np.mean(log_aggregate))


def posterior_and_bounds(run: Run, ids: np.ndarray, iw_samples: int, batch_size: int,
                          seed: int) -> tuple[dict, np.ndarray]:
    """``vae_quality`` on encoded ids ``(N, T)``; also returns the posterior means ``(N, L)``."""
    if iw_samples < 1:
        raise SeqvaeError(f"iw_samples must be at least 1, got {iw_samples}")
    if len(ids) == 0:
        raise SeqvaeError("vae_quality needs at least one sequence")
    model = run.model
    latent_dim = run.config.model.latent_dim
    softmax_grammar = run.grammar if run.config.train.grammar_softmax else None
    id_spec = tf.TensorSpec([None, None], tf.int32)
    z_spec = tf.TensorSpec([None, latent_dim], tf.float32)
    eps_spec = tf.TensorSpec([None, None, latent_dim], tf.float32)
    posterior = inference.compiled_encoder(run)

    @tf.function(input_signature=[id_spec, z_spec, z_spec, eps_spec], autograph=False)
    def log_terms(ids, mean, log_var, eps):
        """-> log p(x|z) and log p(z) - log q(z|x), each (K, B), for the K draws
        z = mean + std * eps[k] (eps ``(K, B, L)``), decoded as one batch of K * B rows; the
        grammar's masks (and a grammar-reading decoder's features) depend on ids only, so they
        are computed once for the K draws."""
        draws, batch = tf.shape(eps)[0], tf.shape(ids)[0]
        z = tf.reshape(randomness.reparametrize(mean[None], log_var[None], eps), [-1, latent_dim])
        tiled = tf.tile(ids, [draws, 1])  # row k * B + i is ids[i]
        features = model.decoder_features(ids)
        if features is not None:
            features = tf.tile(features, [draws, 1, 1])
        logits = model.decoder(z, model.decoder_inputs(tiled), training=False, features=features)
        if softmax_grammar is not None:  # the run's distribution is the constrained softmax
            masks = softmax_grammar.teacher_forced_masks(ids, run.max_len)
            logits = likelihood.constrained_logits(logits, tf.tile(masks, [draws, 1, 1]))
        log_likelihood = tf.reshape(-likelihood.sequence_cross_entropy(tiled, logits),
                                    [draws, batch])
        log_prior = -0.5 * tf.reduce_sum(tf.square(z) + _LOG_2PI, axis=1)
        log_posterior = -0.5 * tf.reduce_sum(
            tf.square(eps) + log_var[None] + _LOG_2PI, axis=2)
        return log_likelihood, tf.reshape(log_prior, [draws, batch]) - log_posterior

    base = randomness.as_seed(seed)
    means, log_vars, recon, kl, nll_iw, mi, mi_weights = [], [], [], [], [], [], []
    # K draws per sequence decode together: at most ``batch_size`` rows per decoder call.
    rows = max(1, batch_size // iw_samples)
    for index, start in enumerate(range(0, len(ids), batch_size)):
        batch = tf.constant(ids[start:start + batch_size], tf.int32)
        mean, log_var = posterior(batch)
        batch_seed = randomness.fold_in(base, index)
        eps = tf.stack([randomness.normal(tf.shape(mean), randomness.fold_in(batch_seed, k))
                        for k in range(iw_samples)])  # (K, B, L)
        parts = [log_terms(batch[i:i + rows], mean[i:i + rows], log_var[i:i + rows],
                           eps[:, i:i + rows]) for i in range(0, int(batch.shape[0]), rows)]
        log_likelihood = np.concatenate([p[0].numpy() for p in parts], axis=1).astype(np.float64)
        log_weights = log_likelihood + np.concatenate([p[1].numpy() for p in parts], axis=1)
        first_z = randomness.reparametrize(mean, log_var, eps[0]).numpy().astype(np.float64)
        # Batch of one with B rows: kl_per_dimension's batch mean leaves (B, L) per example.
        kl.append(tf.reduce_sum(likelihood.kl_per_dimension(mean[None], log_var[None]), -1).numpy())
        recon.append(-np.mean(log_likelihood, axis=0))  # the reconstruction term, averaged over K
        nll_iw.append(math.log(iw_samples) - tf.reduce_logsumexp(log_weights, axis=0).numpy())
        mi.append(_batch_mutual_information(mean.numpy().astype(np.float64),
                                            log_var.numpy().astype(np.float64), first_z))
        mi_weights.append(int(batch.shape[0]))
        means.append(mean.numpy())
        log_vars.append(log_var.numpy())

    mean, log_var = np.concatenate(means), np.concatenate(log_vars)
    recon, nll_iw = np.concatenate(recon), np.concatenate(nll_iw)
    kl = np.concatenate(kl).astype(np.float64)
    tokens = int(np.sum(ids != PAD_ID))
    unit_variance = np.var(mean.astype(np.float64), axis=0)
    result = {
        "sequences": int(len(ids)),
        "tokens_per_sequence": tokens / len(ids),
        "iw_samples": iw_samples,
        "elbo": float(np.mean(-recon - kl)),
        "elbo_se": standard_error(-recon - kl),
        "recon": float(np.mean(recon)),
        "kl": float(np.mean(kl)),
        "nll_iw": float(np.mean(nll_iw)),
        "nll_iw_se": standard_error(nll_iw),
        "nll_iw_per_token": float(np.sum(nll_iw) / tokens),
        "perplexity_iw": float(np.exp(np.sum(nll_iw) / tokens)),
        "kl_per_dimension": [float(v) for v in likelihood.kl_per_dimension(mean, log_var).numpy()],
        "posterior_mean_variance": [float(v) for v in unit_variance],
        "active_units": int(np.sum(unit_variance > ACTIVE_UNIT_THRESHOLD)),
        "active_unit_threshold": ACTIVE_UNIT_THRESHOLD,
        "latent_dim": latent_dim,
        "mutual_information": float(np.average(mi, weights=mi_weights)),
        "mutual_information_batch_size": min(batch_size, len(ids)),
    }
    return result, mean


def vae_quality(run: Run, data, *, iw_samples: int = 10, batch_size: int = 500,
                seed: int = 0) -> dict:
    """Likelihood bounds and latent-space statistics of a run on held-out sequences.

    Likelihoods use the teacher-forced decoder, ``decoder(z, decoder_inputs(ids))``, and are nats
    per sequence (summed over real tokens, ``<eos>`` included), averaged over sequences.

    - ``elbo = -recon - kl``: ``recon`` is ``-log p(x|z)`` averaged over ``iw_samples`` draws
      ``z ~ q(z|x)`` (the same draws as the IW bound); ``kl`` is ``KL(q(z|x) || N(0, I))`` in
      closed form.
    - ``nll_iw``: ``-log 1/K sum_k p(x|z_k) p(z_k) / q(z_k|x)`` with ``K = iw_samples``
      (Burda et al. 2016); an upper bound on ``-log p(x)``, tighter than ``-elbo`` on average.
      ``nll_iw_per_token`` divides the total by the number of real tokens; ``perplexity_iw`` is
      its exponential.
    - ``kl_per_dimension``: ``(L,)`` closed-form KL of each latent dimension, averaged over x.
    - ``active_units``: dimensions with ``Var_x(E[z_d | x]) > active_unit_threshold`` (0.01,
      Burda et al. 2016); ``posterior_mean_variance`` lists those variances.
    - ``mutual_information``: He et al. 2019's estimate of ``I(x; z)`` under q (see
      ``_batch_mutual_information``) per batch of ``batch_size``, averaged over batches.

    Args:
      run: a run loaded with ``seqvae.run.load_run``.
      data: held-out sequences: a path, ``moses:SPLIT`` or a list of strings.
      iw_samples: K, samples per sequence for the IW bound and the reconstruction term.
      batch_size: sequences per batch (and the aggregate posterior's size for the MI estimate).
      seed: the same seed gives the same numbers.

    Returns:
      The dict described above, plus ``sequences``, ``tokens_per_sequence``, ``latent_dim``.
    """
    return posterior_and_bounds(run, inference.encode_ids(run, data).ids, iw_samples, batch_size,
                                 seed)[0]
