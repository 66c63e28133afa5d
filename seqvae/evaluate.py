"""Evaluating a trained run: samples and their MOSES metrics, likelihood bounds, the latent space.

``evaluate(run_dir)`` is what ``seqvae evaluate`` runs: it samples from the prior, scores the
samples with ``seqvae.metrics.moses_metrics``, measures the VAE itself on held-out sequences
(``vae_quality``: ELBO, importance-weighted NLL, KL per dimension, active units, mutual
information), runs the reconstruction protocol of Kusner et al. 2017
(``reconstruction_protocol``), and writes ``RUN_DIR/report/`` (``seqvae.report``).

Every likelihood here is in nats per sequence (the sum over real tokens, ``<eos>`` included),
unlike the training log's ``recon``, which is a mean per token.
"""

from __future__ import annotations

import math
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from seqvae import inference, losses, metrics, randomness
from seqvae.errors import SeqvaeError
from seqvae.run import Run, load_run

MOLECULE_TOKENIZERS = ("smiles", "selfies")
ACTIVE_UNIT_THRESHOLD = 0.01  # Burda et al. 2016: a unit is active if Var_x(E[z_d | x]) > 0.01
_LOG_2PI = math.log(2.0 * math.pi)


def print_to_stderr(line: str) -> None:
    """The default progress callback: one ``seqvae evaluate:`` line on stderr."""
    print(f"seqvae evaluate: {line}", file=sys.stderr, flush=True)


# --- the VAE on held-out sequences ---------------------------------------------------------------


def _logsumexp(values: np.ndarray, axis: int) -> np.ndarray:
    top = np.max(values, axis=axis, keepdims=True)
    return np.squeeze(top, axis) + np.log(np.sum(np.exp(values - top), axis=axis))


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
    log_aggregate = _logsumexp(log_density, axis=1) - math.log(batch)
    return float(neg_entropy - np.mean(log_aggregate))


def _posterior_and_bounds(run: Run, ids: np.ndarray, iw_samples: int, batch_size: int,
                          seed: int) -> tuple[dict, np.ndarray]:
    """``vae_quality`` on encoded ids ``(N, T)``; also returns the posterior means ``(N, L)``."""
    if iw_samples < 1:
        raise SeqvaeError(f"iw_samples must be at least 1, got {iw_samples}")
    if len(ids) == 0:
        raise SeqvaeError("vae_quality needs at least one sequence")
    model = run.model
    latent_dim = run.config.model.latent_dim
    id_spec = tf.TensorSpec([None, None], tf.int32)
    z_spec = tf.TensorSpec([None, latent_dim], tf.float32)

    @tf.function(input_signature=[id_spec])
    def posterior(ids):
        return model.encoder(ids, training=False)

    @tf.function(input_signature=[id_spec, z_spec, z_spec, z_spec])
    def log_terms(ids, mean, log_var, eps):
        """-> log p(x|z) and log p(z) - log q(z|x), each (B,), for z = mean + std * eps."""
        z = mean + tf.exp(0.5 * log_var) * eps
        logits = model.decoder(z, model.decoder_inputs(ids), training=False)
        log_likelihood = -losses.sequence_cross_entropy(ids, logits)
        log_prior = -0.5 * tf.reduce_sum(tf.square(z) + _LOG_2PI, axis=1)
        log_posterior = -0.5 * tf.reduce_sum(tf.square(eps) + log_var + _LOG_2PI, axis=1)
        return log_likelihood, log_prior - log_posterior

    base = randomness.as_seed(seed)
    means, log_vars, recon, kl, nll_iw, mi, mi_weights = [], [], [], [], [], [], []
    for index, start in enumerate(range(0, len(ids), batch_size)):
        batch = tf.constant(ids[start:start + batch_size], tf.int32)
        mean, log_var = posterior(batch)
        batch_seed = randomness.fold_in(base, index)
        log_likelihood, log_weights, first_z = [], [], None
        for k in range(iw_samples):
            eps = randomness.normal(tf.shape(mean), randomness.fold_in(batch_seed, k))
            likelihood, prior_ratio = log_terms(batch, mean, log_var, eps)
            log_likelihood.append(likelihood.numpy().astype(np.float64))
            log_weights.append(log_likelihood[-1] + prior_ratio.numpy())
            if first_z is None:
                first_z = (mean + tf.exp(0.5 * log_var) * eps).numpy().astype(np.float64)
        # Batch of one with B rows: kl_per_dimension's batch mean leaves (B, L) per example.
        kl.append(tf.reduce_sum(losses.kl_per_dimension(mean[None], log_var[None]), -1).numpy())
        recon.append(-np.mean(log_likelihood, axis=0))  # the reconstruction term, averaged over K
        nll_iw.append(math.log(iw_samples) - _logsumexp(np.stack(log_weights), axis=0))
        mi.append(_batch_mutual_information(mean.numpy().astype(np.float64),
                                            log_var.numpy().astype(np.float64), first_z))
        mi_weights.append(int(batch.shape[0]))
        means.append(mean.numpy())
        log_vars.append(log_var.numpy())

    mean, log_var = np.concatenate(means), np.concatenate(log_vars)
    recon, nll_iw = np.concatenate(recon), np.concatenate(nll_iw)
    kl = np.concatenate(kl).astype(np.float64)
    tokens = int(np.sum(ids != 0))
    unit_variance = np.var(mean.astype(np.float64), axis=0)
    result = {
        "sequences": int(len(ids)),
        "tokens_per_sequence": tokens / len(ids),
        "iw_samples": iw_samples,
        "elbo": float(np.mean(-recon - kl)),
        "recon": float(np.mean(recon)),
        "kl": float(np.mean(kl)),
        "nll_iw": float(np.mean(nll_iw)),
        "nll_iw_per_token": float(np.sum(nll_iw) / tokens),
        "perplexity_iw": float(np.exp(np.sum(nll_iw) / tokens)),
        "kl_per_dimension": [float(v) for v in losses.kl_per_dimension(mean, log_var).numpy()],
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
    prepared = inference.encode_ids(run, data)
    return _posterior_and_bounds(run, prepared.ids, iw_samples, batch_size, seed)[0]


# --- reconstruction ----------------------------------------------------------------------------


def reconstruction_protocol(run: Run, data, *, n_molecules: int = 1000, n_encodings: int = 10,
                            n_decodings: int = 10, seed: int = 0) -> dict:
    """Reconstruction as measured by Kusner et al. 2017 (grammar VAE), plus greedy accuracy.

    Each of the first ``n_molecules`` sequences is encoded ``n_encodings`` times
    (``z ~ q(z|x)``) and each z decoded ``n_decodings`` times by sampling at temperature 1.
    ``reconstruction`` is the fraction of all these decodings equal to the input: same canonical
    SMILES for SMILES and SELFIES runs, same text otherwise. ``reconstructed_at_least_once`` is
    the fraction of inputs that came back in any decoding, ``valid_decodings`` the fraction of
    decodings that are valid molecules (molecule runs only). ``token_accuracy_mean_z`` and
    ``sequence_accuracy_mean_z`` are ``inference.reconstruct``'s greedy decoding from the mean.

    Args:
      run: a loaded run.
      data: sequences: a path, ``moses:SPLIT`` or a list of strings.
      n_molecules, n_encodings, n_decodings: the protocol's sizes (Kusner et al.: 10 x 10).
      seed: seeds the encodings and the decodings.

    Returns:
      The dict described above, with the sizes used.
    """
    if min(n_molecules, n_encodings, n_decodings) < 1:
        raise SeqvaeError("n_molecules, n_encodings and n_decodings must be at least 1")
    if isinstance(data, (list, tuple)):
        data = list(data[:n_molecules])  # do not tokenize what is not used
    prepared = inference.encode_ids(run, data)
    ids, texts = prepared.ids[:n_molecules], prepared.texts[:n_molecules]
    count = len(ids)
    mean, log_var = inference.encode(run, texts)
    base = randomness.as_seed(seed)
    encodings = [mean + np.exp(0.5 * log_var) * randomness.normal(
        mean.shape, randomness.fold_in(base, e)).numpy() for e in range(n_encodings)]
    z = np.tile(np.concatenate(encodings), (n_decodings, 1))  # row (d * E + e) * N + i
    decoded = inference.decode(run, z, greedy=False, seed=seed)

    molecules = run.info["tokenizer"] in MOLECULE_TOKENIZERS
    inputs = inference.ids_to_texts(run, ids)  # SMILES for SELFIES runs too
    if molecules:
        canonical = _canonicalizer()
        targets = [canonical(text) or text for text in inputs]
        outputs = [canonical(text) for text in decoded]
    else:
        targets, outputs = inputs, decoded
    same = np.array([out == targets[row % count] for row, out in enumerate(outputs)])
    same = same.reshape(n_decodings * n_encodings, count)
    greedy = inference.reconstruct(run, texts, num_samples=0)
    return {
        "molecules": count,
        "encodings_per_molecule": n_encodings,
        "decodings_per_encoding": n_decodings,
        "reconstruction": float(same.mean()),
        "reconstructed_at_least_once": float(same.any(axis=0).mean()),
        "valid_decodings": float(np.mean([o is not None for o in outputs])) if molecules else None,
        "token_accuracy_mean_z": greedy["token_accuracy_mean_z"],
        "sequence_accuracy_mean_z": greedy["sequence_accuracy_mean_z"],
    }


def _canonicalizer() -> Callable[[str], str | None]:
    """``metrics.canonical_smiles`` with a cache (decodings repeat) and RDKit's logs silenced."""
    from rdkit import rdBase

    cache: dict[str, str | None] = {}

    def canonical(text: str) -> str | None:
        if text not in cache:
            with rdBase.BlockLogs():
                cache[text] = metrics.canonical_smiles(text)
        return cache[text]

    return canonical


# --- the whole evaluation ------------------------------------------------------------------------


def sample_prior(run: Run, n_samples: int, *, seed: int = 0, batch_size: int = 1000,
                 progress: Callable[[str], None] | None = None) -> list[str]:
    """``inference.sample(run, n_samples, seed=seed)`` (the same texts), with progress lines."""
    report = progress or (lambda line: None)
    z = randomness.normal([n_samples, run.config.model.latent_dim],
                          randomness.fold_in(randomness.as_seed(seed), 7)).numpy()
    decode = inference._compiled_decoder(run, False, 1.0, 0)  # one trace for every batch
    base, texts, started = randomness.as_seed(seed), [], time.monotonic()
    for index, start in enumerate(range(0, n_samples, batch_size)):
        ids = decode(tf.constant(z[start:start + batch_size]), randomness.fold_in(base, index))
        texts.extend(inference.ids_to_texts(run, ids.numpy()))
        rate = len(texts) / max(time.monotonic() - started, 1e-9)
        report(f"sampled {len(texts)}/{n_samples} ({rate:.0f}/s)")
    return texts


def _read_texts(source, column: str) -> list[str] | None:
    if source is None:
        return None
    if isinstance(source, (list, tuple)):
        return [str(t) for t in source]
    from seqvae.data import read_sequences

    return read_sequences(source, column).texts


def _encodable(run: Run, texts: Sequence[str]) -> list[str]:
    """The texts the run can encode: valid (molecule runs), known tokens, short enough."""
    from seqvae.data import invalid_smiles
    from seqvae.tokenizers import SelfiesTokenizer

    name = run.info["tokenizer"]
    if name in MOLECULE_TOKENIZERS:
        candidates = [i for i, t in enumerate(texts)
                      if not (name == "selfies" and t.startswith("["))]
        bad = {candidates[i] for i in invalid_smiles([texts[i] for i in candidates])}
        texts = [t for i, t in enumerate(texts) if i not in bad]
    kept = []
    for text in texts:
        try:
            converted = text if name != "selfies" or text.startswith("[") else (
                SelfiesTokenizer.from_smiles(text))
            tokens = run.tokenizer.tokenize(converted)
        except SeqvaeError:
            continue
        if len(tokens) < run.max_len and all(token in run.vocab for token in tokens):
            kept.append(text)
    return kept


def _generation_metrics(samples: list[str], train, test, test_scaffolds, include_fcd: bool,
                        progress, notes: list[str]) -> dict:
    """``moses_metrics`` with None for (and a note on) the metrics whose reference is missing.

    ``"default"`` references are MOSES's own splits (statistics cached per process).
    """
    missing = [name for name, ref in (("Test", test), ("TestSF", test_scaffolds)) if ref is None]
    no_bits = np.zeros((0, metrics.FINGERPRINT_BITS // 8), np.uint8)
    empty = metrics.ReferenceStats(0, no_bits, {}, {})
    size = len(samples)
    k = tuple(s for s in (1000, 10000) if s <= size) or (size,)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values = metrics.moses_metrics(
            samples,
            train=None if train == "default" else (train if train is not None else frozenset()),
            test=empty if test is None else (None if test == "default" else test),
            test_scaffolds=empty if test_scaffolds is None else (
                None if test_scaffolds == "default" else test_scaffolds),
            include_fcd=include_fcd, k=k, progress=progress)
    notes.extend(str(w.message) for w in caught if "unique@" in str(w.message))
    # moses_metrics joins its notes with "; "; each starts with "FCD"
    for note in re.split(r"; (?=FCD)", values.pop("note", "")):
        if note and not any(note.startswith(f"FCD/{name} ") for name in missing):
            notes.append(note)
    for name, argument in (("Test", "test"), ("TestSF", "test_scaffolds")):
        if name in missing:
            for metric in ("FCD", "SNN", "Frag", "Scaf"):
                values[f"{metric}/{name}"] = None
            notes.append(f"FCD/{name}, SNN/{name}, Frag/{name}, Scaf/{name} not computed: "
                         f"no {argument} set given")
    if train is None:
        values["Novelty"] = None
        notes.append("Novelty not computed: no train set given")
    return values


def evaluate(run_dir: str, *, n_samples: int = 30000, test=None, test_scaffolds=None, train=None,
             include_fcd: bool = True, iw_samples: int = 10, recon_molecules: int = 1000,
             quality_sequences: int = 10000, seed: int = 0,
             progress: Callable[[str], None] | None = print_to_stderr) -> dict:
    """Evaluates a run and writes ``RUN_DIR/report/`` (see ``seqvae.report.write_report``).

    References: a run trained on MOSES (``run.json`` ``data_source`` ``moses:...``) defaults to
    MOSES's test, test_scaffolds and train splits, as MOSES reports; otherwise only the sets given
    are used and the metrics that need a missing one are None, with a note. Held-out sequences
    the run cannot encode (unknown tokens, too long, invalid SMILES) are left out, with a note.

    Args:
      run_dir: a trained run directory.
      n_samples: molecules sampled from the prior (MOSES: 30,000).
      test, test_scaffolds, train: SMILES lists, paths or ``moses:SPLIT``. ``test`` is also the
        held-out set of ``vae_quality`` and ``reconstruction_protocol``. A given ``train`` is
        canonicalized for Novelty (MOSES's own split already is).
      include_fcd: compute FCD (needs the fcd extra; a note if it is missing).
      iw_samples: K of the importance-weighted bound.
      recon_molecules: molecules in the reconstruction protocol (0 skips it).
      quality_sequences: the first this many test sequences go to ``vae_quality`` (0 skips it).
      seed: seeds sampling, the bounds and the protocol.
      progress: called with status lines; None for silence.

    Returns:
      ``{"run_dir", "n_samples", "seed", "tokenizer", "data_source", "generation", "vae_quality",
      "reconstruction", "references", "wall_seconds", "notes", "report_dir"}``.
    """
    from seqvae.report import write_report

    if n_samples < 0 or iw_samples < 1 or recon_molecules < 0 or quality_sequences < 0:
        raise SeqvaeError("n_samples, recon_molecules and quality_sequences must be >= 0 and "
                          "iw_samples >= 1")
    report = progress or (lambda line: None)
    started = time.monotonic()
    walls: dict[str, float] = {}
    run = load_run(run_dir)
    notes: list[str] = []
    molecules = run.info["tokenizer"] in MOLECULE_TOKENIZERS
    moses_run = str(run.info.get("data_source", "")).startswith("moses:")
    sets, references = _reference_sets(run, test, test_scaffolds, train, moses_run)
    walls["load"] = time.monotonic() - started

    tick = time.monotonic()
    report(f"sampling {n_samples} sequences from the prior")
    samples = sample_prior(run, n_samples, seed=seed, progress=report)
    walls["sampling"] = time.monotonic() - tick

    generation = None
    tick = time.monotonic()
    if not molecules:
        notes.append(f"MOSES metrics not computed: the run's tokenizer is "
                     f"{run.info['tokenizer']!r}, not smiles or selfies")
    elif not samples:
        notes.append("MOSES metrics not computed: n_samples is 0")
    else:
        generation = _generation_metrics(samples, sets["train"], sets["test"],
                                         sets["test_scaffolds"], include_fcd, report, notes)
    walls["generation_metrics"] = time.monotonic() - tick

    held_out, means, quality, reconstruction = [], None, None, None
    test_texts = sets["held_out"]
    if test_texts is None:
        notes.append("vae_quality and reconstruction not computed: no test set given")
    else:
        wanted = test_texts[:max(quality_sequences, recon_molecules)]
        held_out = _encodable(run, wanted)
        if len(held_out) < len(wanted):
            notes.append(f"{len(wanted) - len(held_out)} of the first {len(wanted)} test sequences "
                         "left out of the VAE measures: invalid, with tokens not in the run's "
                         "vocabulary, or longer than its max_len")
    tick = time.monotonic()
    if held_out and quality_sequences > 0:
        report(f"vae_quality on {min(quality_sequences, len(held_out))} test sequences "
               f"(K={iw_samples})")
        prepared = inference.encode_ids(run, held_out[:quality_sequences])
        quality, means = _posterior_and_bounds(run, prepared.ids, iw_samples, batch_size=500,
                                               seed=seed)
    walls["vae_quality"] = time.monotonic() - tick
    tick = time.monotonic()
    if held_out and recon_molecules > 0:
        report(f"reconstruction protocol on {min(recon_molecules, len(held_out))} molecules "
               "(10 encodings x 10 decodings each)")
        reconstruction = reconstruction_protocol(run, held_out, n_molecules=recon_molecules,
                                                 seed=seed)
    walls["reconstruction"] = time.monotonic() - tick
    walls["total"] = time.monotonic() - started

    results = {
        "run_dir": run.run_dir, "n_samples": n_samples, "seed": seed,
        "tokenizer": run.info["tokenizer"], "data_source": run.info.get("data_source"),
        "generation": generation, "vae_quality": quality, "reconstruction": reconstruction,
        "references": references, "wall_seconds": walls, "notes": notes,
    }
    report("writing the report")
    plotted = held_out[:quality_sequences] if means is not None else held_out
    results["report_dir"] = write_report(run.run_dir, results, samples, plotted, test_means=means)
    report(f"report written to {results['report_dir']}")
    return results


def _reference_sets(run: Run, test, test_scaffolds, train, moses_run: bool) -> tuple[dict, dict]:
    """The references for ``_generation_metrics``, the held-out texts, and their descriptions.

    A set not given is ``"default"`` (MOSES's own split) for a MOSES run, None otherwise.
    """
    column = run.config.data.column
    given = {"test": test, "test_scaffolds": test_scaffolds, "train": train}
    sets = {name: _read_texts(source, column) for name, source in given.items()}
    if sets["train"] is not None and run.info["tokenizer"] in MOLECULE_TOKENIZERS:
        sets["train"] = metrics.remove_invalid(sets["train"], canonize=True)
    held_out = sets["test"]
    if held_out is None and moses_run:
        held_out = metrics.load_moses_split("test")
    references = {}
    for name, texts in sets.items():
        if texts is None:
            references[name] = f"moses:{name}" if moses_run else None
        else:
            source = given[name] if isinstance(given[name], str) else "list"
            references[name] = f"{source} ({len(texts)} sequences)"
    default = "default" if moses_run else None
    sets = {name: default if texts is None else texts for name, texts in sets.items()}
    if isinstance(sets["train"], list):
        sets["train"] = set(sets["train"])
    return {**sets, "held_out": held_out}, references
