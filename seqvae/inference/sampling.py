"""Sampling from the prior: under the grammar mask, or by rejection under the grammar (the model conditioned on it)."""

from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf

from seqvae.data.preparation import ids_to_texts
from seqvae.errors import SeqvaeError
from seqvae.inference import compiled as compiled_lib
from seqvae.inference import texts as text_decoding
from seqvae.inference.priors import prior_draw, run_prior
from seqvae.model import decoding
from seqvae.run import Run


def sample(run: Run, num: int, temperature: float = 1.0, top_k: int = 0, greedy: bool = False,
           seed: int = 0, batch_size: int = 1000,
           progress: Callable[[str], None] | None = None, grammar: bool = True,
           prior: str | None = None, rejection: int | None = None,
           stats: dict | None = None) -> list[str]:
    """Draws ``num`` texts from the prior; the same seed gives the same texts.

    ``prior``: ``standard`` samples ``z ~ N(0, I)``, ``decoding.prior_z(num, latent_dim, seed)``
    (the exported ``sample`` signature and ``decoding.sample_prior`` draw the same); ``fitted``
    the run's fitted prior (``fit_prior``, ``seqvae.latent_prior``) from the same noise; None
    the run's own (``run_prior``). ``grammar`` as in ``compiled_decoder``.

    ``rejection`` R > 0 (``rejection_sample``): SMILES runs draw from the model *conditioned*
    on the grammar instead of decoding under its mask; None takes the run's
    ``model.rejection_rounds`` (0 unless its preset chose rejection), and 0 masks. Ignored where
    the mask is the model's own distribution (``train.grammar_softmax``) or there is no grammar
    (other notations). ``grammar=False`` with the run's default means no grammar at all.
    ``stats``, when given, receives ``rejected`` (the share of first draws the grammar
    rejected; 0 without rejection) and ``masked`` (the share decoded under the mask after R
    rounds).
    """
    rejection = rejection_rounds(run, rejection, grammar)
    prior = run_prior(run, prior)
    z = prior_draw(run, num, seed, prior)
    if rejection:
        return rejection_sample(run, z, rejection, temperature=temperature, top_k=top_k,
                                greedy=greedy, seed=seed, batch_size=batch_size,
                                progress=progress, prior=prior, stats=stats)
    if stats is not None:
        stats.update(rejected=0.0, masked=0.0)
    return text_decoding.decode(run, z, greedy=greedy, temperature=temperature, top_k=top_k, seed=seed,
                  batch_size=batch_size, progress=progress, verb="sampled", grammar=grammar)


def rejection_rounds(run: Run, rejection: int | None = None, grammar: bool = True) -> int:
    """The rejection rounds ``sample`` runs for ``rejection`` (None: the run's
    ``model.rejection_rounds``, 0 without the grammar): 0 where there is nothing to reject
    against (no grammar: other notations) or the mask is the model's own distribution
    (``train.grammar_softmax``). ``evaluate`` and the exported ``sample`` ask here too.

    Raises:
      SeqvaeError: ``rejection`` < 0, or > 0 with ``grammar`` False.
    """
    if rejection is None:
        rejection = run.config.model.rejection_rounds if grammar else 0
    if rejection < 0:
        raise SeqvaeError(f"rejection rounds must be >= 0 (0 = off), got {rejection}")
    if rejection and not grammar:
        raise SeqvaeError("rejection sampling works under the grammar: sample with the grammar, "
                          "or with rejection 0")
    return rejection if run.grammar is not None and not run.config.train.grammar_softmax else 0


def _grammar_check(run: Run, compiled: bool = False):
    """``ids (B, T) -> (B,)`` the first position the grammar rejects (-1: none), traced once;
    ``compiled``: under XLA (10x faster a batch of the demo's, at a compile of about 2 s)."""
    return compiled_lib.cached(run, ("first_violation", compiled), lambda: tf.function(
        run.grammar.first_violation, reduce_retracing=True, autograph=False,
        jit_compile=compiled or None))


def first_violations(run: Run, ids: np.ndarray, batch_size: int = 1000,
                     compiled: bool | None = None) -> np.ndarray:
    """The first position of each row of ``ids (N, T)`` that the run's grammar rejects, ``(N,)``
    int (-1: none), checked in batches of ``batch_size`` rows. ``compiled``: under XLA, every
    batch padded to ``batch_size`` rows so that it compiles once; None: from
    ``text_decoding.COMPILED_MASK_MIN`` rows on."""
    if compiled is None:
        compiled = len(ids) >= text_decoding.COMPILED_MASK_MIN
    check = _grammar_check(run, compiled)
    firsts = []
    for start in range(0, len(ids), batch_size):
        batch = ids[start:start + batch_size]
        rows = len(batch)
        if compiled and rows < batch_size:
            batch = np.pad(batch, [(0, batch_size - rows), (0, 0)])
        firsts.append(check(tf.constant(batch)).numpy()[:rows])
    return np.concatenate(firsts) if firsts else np.zeros((0,), np.int32)


def rejection_decoders(run: Run) -> list:
    """The traced functions ``rejection_sample`` runs below ``text_decoding.COMPILED_MASK_MIN`` rows: the
    sampler that stops each row at its first forbidden token, and the masked sampler for the
    remainder."""
    return [compiled_lib.compiled_decoder(run, False, 1.0, 0, True, reject=reject) for reject in (True, False)]


def trace_rejection_sampler(run: Run) -> None:
    """Traces what ``rejection_sample`` runs (``rejection_decoders``) for every batch size and
    temperature: a server's start-up, so that no request waits on tracing."""
    for decoder in rejection_decoders(run):
        text_decoding.trace_for_any_batch_size(decoder, run, temperatures=1, prefixed=False)


def rejection_sample(run: Run, z: np.ndarray, rounds: int, temperature: float = 1.0,
                     top_k: int = 0, greedy: bool = False, seed: int = 0,
                     batch_size: int = 1000, progress: Callable[[str], None] | None = None,
                     prior: str | None = None, stats: dict | None = None,
                     return_z: bool = False):
    """Samples from the model conditioned on the grammar: exact where the mask is not.

    Decoding under the mask renormalises the model's distribution over the allowed tokens at
    every step, which moves probability onto strings the model itself finds unlikely (the
    completions of prefixes heading for an impossible token: measured, they are less like the
    training molecules). This draws instead from ``p(x | x grammatical)``: each row is decoded
    *without* the mask from its ``z``, and stopped at its first token the grammar forbids
    (``decoding.sample_from_z(reject=True)``: what ``SmilesGrammar.first_violation`` rejects,
    with no work spent on the rest of the string). The rows the first round rejects are filled
    by later rounds, for up to ``rounds`` rounds: each draws fresh ``z`` from ``prior`` and fresh
    noise for the pending rows and spares (``decoding.rejection_attempts``: enough that one round
    nearly always fills them all), and gives its accepted draws to the pending rows in order;
    what is still pending then is decoded under the mask from the ``z`` of a draw the last round
    rejected (a share of about ``rejected ** rounds`` or less). Sampling is Gumbel-max, so a row
    the first round accepts is exactly what masked sampling with the same seed gives.

    Args:
      run: a SMILES run with a grammar.
      z: the first round's latent vectors ``(N, latent_dim)``.
      rounds: R >= 1.
      batch_size: the first round's decoding batches; a later round decodes its draws in as
        few batches of at most twice as many rows.
      prior: where later rounds draw ``z`` (``standard`` or ``fitted``; None: the run's own).
      stats: receives ``rejected`` (share of rows the first round rejected) and ``masked``
        (share decoded under the mask at the end).
      return_z: also return the latent vector each row was decoded from.

    Returns:
      N texts in row order, deterministic for a seed; with ``return_z``, ``(texts, z)``, z
      float32 ``(N, latent_dim)`` (a row the grammar rejected comes from a new z).
    """
    if rounds < 1 or run.grammar is None:
        raise SeqvaeError("rejection sampling needs a SMILES run and at least one round")
    compiled = len(z) >= text_decoding.COMPILED_MASK_MIN  # every round's check under XLA where it pays
    z = np.array(z, np.float32)  # a copy: later rounds replace the rejected rows' z
    texts: list[str | None] = [None] * len(z)
    pending, first = np.arange(len(z)), None
    for round_ in range(rounds):
        round_seed = seed if round_ == 0 else _derived_seed(seed, round_)
        if round_:  # fresh draws for the pending rows, and spares
            draws = int(decoding.rejection_attempts(len(pending), *first))
            drawn_z = prior_draw(run, draws, round_seed, prior)
            batches = -(-draws // (2 * batch_size))
            size = -(-draws // batches)
        else:
            drawn_z, size = z, batch_size
        decoded: list[tuple[np.ndarray, np.ndarray]] = []
        text_decoding.decode_id_batches(run, drawn_z, decoded.append, greedy=greedy, temperature=temperature,
                          top_k=top_k, seed=round_seed, batch_size=size, reject=True,
                          compiled_mask=compiled)
        ids = np.concatenate([d[0] for d in decoded]) if decoded else np.zeros(
            (0, run.max_len), np.int32)
        bad = np.concatenate([d[1] for d in decoded]) if decoded else np.zeros((0,), bool)
        if round_:
            kept = np.flatnonzero(~bad)[:len(pending)]  # the first accepted draws, in order
            filled, pending = pending[:len(kept)], pending[len(kept):]
            z[filled] = drawn_z[kept]
            z[pending] = drawn_z[np.flatnonzero(bad)[:len(pending)]]  # for the masked rest
        else:
            kept, filled = np.flatnonzero(~bad), pending[~bad]
            first, pending = (int(bad.sum()), len(bad)), pending[bad]
        for row, text in zip(filled, ids_to_texts(run.codec, ids[kept])):
            texts[row] = text
        if progress is not None:
            progress(f"sampled {len(z) - len(pending)}/{len(z)} the grammar accepts "
                     f"(round {round_ + 1} of {rounds})")
        if not len(pending):
            break
    if len(pending):  # what R rounds did not get past the grammar: under the mask
        last = text_decoding.decode(run, z[pending], greedy=greedy, temperature=temperature, top_k=top_k,
                      seed=_derived_seed(seed, rounds), batch_size=batch_size,
                      grammar=True)
        for row, text in zip(pending, last):
            texts[row] = text
    if stats is not None:
        stats.update(rejected=first[0] / max(first[1], 1), masked=len(pending) / max(len(z), 1))
    return (texts, z) if return_z else texts


def _derived_seed(seed: int, salt: int) -> int:
    """The int seed of rejection round ``salt`` of ``seed`` (``decoding.rejection_round_seed``)."""
    return int(decoding.rejection_round_seed(seed, salt)[0])
