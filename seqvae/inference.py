"""Using a trained run: sample, encode, decode, reconstruct and interpolate.

Each function takes a ``seqvae.training.rundir.Run`` loaded with ``load_run`` and works in
batches through compiled ``tf.function`` s; texts come back in input order. Texts go in and come
out through ``seqvae.data.preparation`` (``encode_texts``, ``ids_to_texts``): SMILES for every
molecule run, SELFIES runs included.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import sys
import time
from collections import Counter
from typing import Callable

import numpy as np
import tensorflow as tf

from seqvae import latent_prior
from seqvae.data import sources
from seqvae.data.preparation import EncodedTexts, encode_texts, ids_to_texts
from seqvae.data.vocabulary import PAD_ID
from seqvae.errors import SeqvaeError
from seqvae.model import decoding, randomness
from seqvae.model import grammar as grammar_module
from seqvae.training.rundir import Run


def _cached(run: Run, key: tuple, build: Callable):
    """``build()`` for this run's model and ``key``, made once per run: a command that decodes
    or encodes several times (evaluate: samples, reconstruction, interpolation) traces once."""
    key = (id(run.model), *key)
    if key not in run.compiled:
        run.compiled[key] = build()
    return run.compiled[key]


def compiled_decoder(run: Run, greedy: bool = True, temperature: float = 1.0, top_k: int = 0,
                     grammar: bool = True, beam_width: int = 0, compiled_mask: bool = False,
                     every_hypothesis: bool = False, reject: bool = False):
    """``(z (B, L), seed (2,)) -> ids (B, max_len)``, traced once for every batch size.

    ``grammar``: SMILES runs decode under the grammar mask (``seqvae.model.grammar``); False
    decodes without it (other notations never have one), except for runs trained with the
    constrained softmax (``train.grammar_softmax``), whose distribution is the masked one.
    ``beam_width`` > 1: beam search (length-normalised) instead of greedy or sampled decoding;
    ``every_hypothesis``: all its hypotheses, ids ``(B, beam_width, max_len)``, best first.
    A float32 scalar tensor passed as a third argument replaces ``temperature`` without a new trace (the explorer's slider).
    ``compiled_mask``: the grammar's state machine under XLA (``decoding.sample_from_z``):
    faster a step, at a compile of about a second the first time.
    Keyword arguments ``prefix`` int32 ``(B, P)`` and ``prefix_lengths`` int32 ``(B,)`` make each
    row first emit its prefix's first tokens (``decoding.forced_prefix_step_fn``; not with beam
    search). ``reject``: decodes without the mask, each row stopped at its first token the
    grammar forbids, -> ``(ids, rejected (B,))`` (``decoding.sample_from_z``; rejection rounds).
    """
    model = run.model
    masked = bool(grammar or run.config.train.grammar_softmax or reject)
    compiled_mask = compiled_mask and masked  # no mask, nothing to compile: one trace, one key

    def build():
        mask = run.grammar if masked else None

        @tf.function(reduce_retracing=True, autograph=False)
        def decode_ids(z, seed, temperature=temperature, prefix=None, prefix_lengths=None):
            return decoding.sample_from_z(model, z, run.max_len, greedy=greedy,
                                          temperature=temperature, top_k=top_k, seed=seed,
                                          grammar=mask, beam_width=beam_width,
                                          compiled_mask=compiled_mask,
                                          every_hypothesis=every_hypothesis, prefix=prefix,
                                          prefix_lengths=prefix_lengths, reject=reject)

        return decode_ids

    return _cached(run, ("decoder", greedy, float(temperature), top_k, masked, beam_width,
                         every_hypothesis, compiled_mask, reject), build)


def compiled_encoder(run: Run):
    """``ids (B, T) -> (z_mean, z_log_var)``, each ``(B, latent_dim)``, traced once per shape."""
    model = run.model
    return _cached(run, ("encoder",), lambda: tf.function(
        lambda batch: model.encoder(batch, training=False), reduce_retracing=True,
        autograph=False))


# Decoding this many vectors or more runs the grammar mask under XLA: its compile (about a
# second) is paid back (about 0.2 s saved per 1,000 demo-size molecules,
# bench/grammar_throughput.py).
COMPILED_MASK_MIN = 10_000


def decode(run: Run, z: np.ndarray, greedy: bool = True, temperature: float = 1.0, top_k: int = 0,
           seed: int = 0, batch_size: int = 1000,
           progress: Callable[[str], None] | None = None, verb: str = "decoded",
           grammar: bool = True, beam_width: int = 0, prefix: np.ndarray | None = None,
           prefix_lengths: np.ndarray | None = None) -> list[str]:
    """Decodes latent vectors ``z (N, latent_dim)`` into texts.

    Batch ``i`` samples with the seed ``fold_in(seed, i)``; ``progress`` gets a line per batch,
    ``"{verb} done/total (rate/s)"``; ``grammar`` and ``beam_width`` as in ``compiled_decoder``.
    From ``COMPILED_MASK_MIN`` vectors on, the grammar mask runs under XLA (the same texts).
    ``prefix`` int ``(N, P)`` token ids and ``prefix_lengths`` int ``(N,)``: row ``i`` begins
    with ``prefix[i, :prefix_lengths[i]]`` and the decoder completes it from ``z[i]`` (not with
    beam search).
    """
    texts: list[str] = []
    decode_id_batches(run, z, lambda ids: texts.extend(ids_to_texts(run.codec, ids)), greedy,
                      temperature, top_k, seed, batch_size, progress, verb, grammar, beam_width,
                      prefix, prefix_lengths)
    return texts


def beam_hypotheses(run: Run, z: np.ndarray, beam_width: int, grammar: bool = True,
                    batch_size: int = 200) -> list[list[str]]:
    """Every hypothesis of a beam search from each ``z (N, L)``: N lists of ``beam_width``
    texts, best first (length-normalised log-probability): the molecules the decoder finds most
    likely near a point, not only the one ``decode(beam_width=...)`` keeps."""
    z = np.asarray(z, np.float32)
    hypotheses = compiled_decoder(run, True, 1.0, 0, grammar, beam_width, every_hypothesis=True)
    out: list[list[str]] = []
    for start in range(0, len(z), batch_size):
        ids = hypotheses(tf.constant(z[start:start + batch_size]), tf.constant([0, 0])).numpy()
        texts = ids_to_texts(run.codec, ids.reshape(-1, ids.shape[-1]))  # ids (b, K, T)
        out += [texts[i:i + beam_width] for i in range(0, len(texts), beam_width)]
    return out


def decode_id_batches(run: Run, z: np.ndarray, out: Callable[[np.ndarray], None],
                      greedy: bool = True, temperature: float = 1.0, top_k: int = 0,
                      seed: int = 0, batch_size: int = 1000,
                      progress: Callable[[str], None] | None = None, verb: str = "decoded",
                      grammar: bool = True, beam_width: int = 0, prefix: np.ndarray | None = None,
                      prefix_lengths: np.ndarray | None = None, reject: bool = False,
                      compiled_mask: bool | None = None) -> None:
    """``decode``'s loop: hands the int32 ids ``(b, max_len)`` of each batch to ``out``; with
    ``reject`` (``compiled_decoder``) the pair ``(ids, rejected (b,))``. ``compiled_mask``:
    None from ``COMPILED_MASK_MIN`` vectors on."""
    z = np.asarray(z, np.float32)
    if z.ndim != 2 or z.shape[1] != run.config.model.latent_dim:
        raise SeqvaeError(f"z must have shape (N, {run.config.model.latent_dim}), got {z.shape}")
    prefixed = prefix is not None
    if prefixed:
        if beam_width > 1:
            raise SeqvaeError("a forced prefix cannot be combined with beam search")
        prefix = np.asarray(prefix, np.int32)
        prefix_lengths = np.asarray(prefix_lengths, np.int32)
        if prefix.ndim != 2 or len(prefix) != len(z) or prefix_lengths.shape != (len(z),):
            raise SeqvaeError(f"prefix must be (N, P) and prefix_lengths (N,) for N = {len(z)}, "
                              f"got {prefix.shape} and {prefix_lengths.shape}")
    # Sampling passes its temperature as a tensor: one graph for every temperature (the same
    # ids as a graph with the temperature built in, tested), so a new one does not trace.
    shared = not greedy and not beam_width and temperature > 0
    if compiled_mask is None:
        compiled_mask = len(z) >= COMPILED_MASK_MIN
    extra = (tf.constant(temperature, tf.float32),) if shared else ()

    def decoder(compiled: bool):
        decode_ids = compiled_decoder(run, greedy, 1.0 if shared else temperature, top_k,
                                      grammar, beam_width, compiled_mask=compiled, reject=reject)
        _trace_for_any_batch_size(decode_ids, run, len(extra), prefixed)
        return decode_ids

    decoders: dict = {}  # traced on first use: small batches may need the plain one only
    base = randomness.as_seed(seed)
    done, started = 0, time.monotonic()
    for i, start in enumerate(range(0, len(z), batch_size)):
        forced = {} if not prefixed else {
            "prefix": tf.constant(prefix[start:start + batch_size]),
            "prefix_lengths": tf.constant(prefix_lengths[start:start + batch_size])}
        rows = z[start:start + batch_size]
        # A batch too small for XLA to pay off (a last batch, a small rejection round) decodes
        # with the plain state machine: chosen here, once, rather than by a tf.cond at every
        # step of the loop (whose untaken branch still passes through the executor).
        compiled = compiled_mask and len(rows) >= grammar_module.COMPILED_MIN_ROWS
        if compiled not in decoders:
            decoders[compiled] = decoder(compiled)
        decoded = decoders[compiled](tf.constant(rows), randomness.fold_in(base, i), *extra,
                                     **forced)
        out(tf.nest.map_structure(lambda t: t.numpy(), decoded))
        done += len(rows)
        if progress is not None:
            rate = done / max(time.monotonic() - started, 1e-9)
            progress(f"{verb} {done}/{len(z)} ({rate:.0f}/s)")


def _trace_for_any_batch_size(decode_ids, run: Run, temperatures: int, prefixed: bool) -> None:
    """Traces ``decode_ids`` (``compiled_decoder``) once for batches of any size, before its
    first call: a trace for the first batch's own size would be followed by another when a
    batch of a different size comes (a sample's last, rejection's later rounds: 1.2 s of a
    10,000-molecule demo sample). Later calls find the trace (a lookup)."""
    specs = [tf.TensorSpec([None, run.config.model.latent_dim], tf.float32),
             tf.TensorSpec([2], tf.int32)] + [tf.TensorSpec([], tf.float32)] * temperatures
    forced = {"prefix": tf.TensorSpec([None, None], tf.int32),
              "prefix_lengths": tf.TensorSpec([None], tf.int32)} if prefixed else {}
    decode_ids.get_concrete_function(*specs, **forced)


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
    return decode(run, z, greedy=greedy, temperature=temperature, top_k=top_k, seed=seed,
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
        raise SeqvaeError("rejection sampling works under the grammar: drop --no-grammar, or "
                          "use --rejection 0")
    return rejection if run.grammar is not None and not run.config.train.grammar_softmax else 0


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
    return _cached(run, version, lambda: latent_prior.load(run.run_dir))


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


def prior_draw(run: Run, num: int, seed, prior: str | None = None) -> np.ndarray:
    """``num`` latent vectors float32 ``(num, latent_dim)`` from the standard or the fitted
    prior (None: the run's own, ``run_prior``), the same for a seed."""
    prior = run_prior(run, prior)
    z = decoding.prior_z(num, run.config.model.latent_dim, seed).numpy()
    if prior == "fitted" and run.config.model.prior == "aggregate" and not os.path.exists(
            os.path.join(run.run_dir, latent_prior.FILENAME)):
        raise SeqvaeError(f"{run.run_dir}: its prior (model.prior=aggregate) is kept when "
                          f"training ends, and this run has not ended: finish it with 'seqvae "
                          f"train --resume --out {run.run_dir}', or keep it now with 'seqvae "
                          f"fit-prior {run.run_dir} --aggregate' (or sample --prior standard)")
    if prior == "fitted":
        return loaded_prior(run).transform(z, seed)
    if prior != "standard":
        raise SeqvaeError(f"prior must be one of {', '.join(latent_prior.PRIORS)}, got {prior!r}")
    return z


def _grammar_check(run: Run, compiled: bool = False):
    """``ids (B, T) -> (B,)`` the first position the grammar rejects (-1: none), traced once;
    ``compiled``: under XLA (10x faster a batch of the demo's, at a compile of about 2 s)."""
    return _cached(run, ("first_violation", compiled), lambda: tf.function(
        run.grammar.first_violation, reduce_retracing=True, autograph=False,
        jit_compile=compiled or None))


def first_violations(run: Run, ids: np.ndarray, batch_size: int = 1000,
                     compiled: bool | None = None) -> np.ndarray:
    """The first position of each row of ``ids (N, T)`` that the run's grammar rejects, ``(N,)``
    int (-1: none), checked in batches of ``batch_size`` rows. ``compiled``: under XLA, every
    batch padded to ``batch_size`` rows so that it compiles once; None: from
    ``COMPILED_MASK_MIN`` rows on."""
    if compiled is None:
        compiled = len(ids) >= COMPILED_MASK_MIN
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
    """The traced functions ``rejection_sample`` runs below ``COMPILED_MASK_MIN`` rows: the
    sampler that stops each row at its first forbidden token, and the masked sampler for the
    remainder."""
    return [compiled_decoder(run, False, 1.0, 0, True, reject=reject) for reject in (True, False)]


def trace_rejection_sampler(run: Run) -> None:
    """Traces what ``rejection_sample`` runs (``rejection_decoders``) for every batch size and
    temperature: a server's start-up, so that no request waits on tracing."""
    for decoder in rejection_decoders(run):
        _trace_for_any_batch_size(decoder, run, temperatures=1, prefixed=False)


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
    compiled = len(z) >= COMPILED_MASK_MIN  # every round's check under XLA where it pays
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
        decode_id_batches(run, drawn_z, decoded.append, greedy=greedy, temperature=temperature,
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
        last = decode(run, z[pending], greedy=greedy, temperature=temperature, top_k=top_k,
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


def fit_prior(run: Run, data="moses:train", limit: int = 50_000, batch_size: int = 1000,
              components: int = 1, aggregate: bool = False, widen: float | None = None):
    """Fits ``seqvae.latent_prior`` (a Gaussian, or a mixture of ``components``; with
    ``aggregate`` the aggregate posterior itself, each posterior widened by ``widen``, None =
    the run's ``model.prior_widen``) to the encodings of ``limit`` sequences of ``data`` (the
    run's training source by default) drawn at random (seeded; 0 = all of them: a file in some
    order, MOSES's among them, is not described by its first lines) and saves it in the run
    directory. Returns the ``FittedPrior`` or ``AggregatePrior``."""
    seqs = sources.read_sequences(data, run.config.data.column)
    if limit:
        seqs = sources.random_subset(seqs, limit, seed=0)
    encoded = encode_texts(run.codec, seqs.texts, on_error="skip", source=seqs.source,
                           check_molecules=False)
    if not len(encoded.ids):
        raise SeqvaeError(f"{seqs.source}: nothing to fit the prior to (no line can be encoded)")
    mean, log_var = encode_batches(run, encoded.ids, batch_size)
    if aggregate:
        prior = latent_prior.fit_aggregate(mean, log_var, seqs.source, run.config.model.prior_widen
                                           if widen is None else widen)
    else:
        prior = latent_prior.fit(mean, log_var, seqs.source, components=components)
    latent_prior.save(run.run_dir, prior)
    return prior


def encode_ids(run: Run, data, strict: bool = False, skip: bool = False,
               limit: int = 0) -> EncodedTexts:
    """Reads ``data`` (path, ``moses:SPLIT`` or list; its first ``limit`` lines, 0 = all) and
    encodes it with the run's codec.

    Invalid SMILES are left out with a note on stderr (``strict``: an error); unknown tokens and
    over-long sequences are errors naming the line, or left out too with ``skip``.
    """
    seqs = sources.read_sequences(data, run.config.data.column, limit=limit)
    policy = "skip" if skip else "raise" if strict else "skip_invalid"
    encoded = encode_texts(run.codec, seqs.texts, on_error=policy, source=seqs.source,
                           line_numbers=seqs.line_numbers,
                           check_molecules=not seqs.source.startswith("moses:"))
    if encoded.problems and not skip:
        lines = ", ".join(message.split(": ", 1)[0] for message in encoded.messages[:5])
        print(f"seqvae: skipped {len(encoded.problems)} invalid SMILES ({lines}"
              f"{', ...' if len(encoded.problems) > 5 else ''}); use --strict to fail instead",
              file=sys.stderr)
    if not len(encoded.ids):
        raise SeqvaeError(f"{seqs.source}: nothing to encode (no line can be encoded by this run)")
    return encoded


def encode_batches(run: Run, ids: np.ndarray, batch_size: int = 1000):
    """``(z_mean, z_log_var)``, float32 ``(N, latent_dim)``, of encoded ids ``(N, T)``."""
    encoder = compiled_encoder(run)
    means, log_vars = [], []
    for start in range(0, len(ids), batch_size):
        mean, log_var = encoder(tf.constant(ids[start:start + batch_size]))
        means.append(mean.numpy())
        log_vars.append(log_var.numpy())
    return np.concatenate(means).astype(np.float32), np.concatenate(log_vars).astype(np.float32)


def encode(run: Run, data, strict: bool = False, batch_size: int = 1000):
    """Encodes sequences -> ``(z_mean, z_log_var)``, float32 ``(N, latent_dim)`` in input order."""
    return encode_batches(run, encode_ids(run, data, strict).ids, batch_size)


def encode_to_file(run: Run, data, out: str, log_var_out: str | None = None, *,
                   strict: bool = False, batch_size: int = 1000, chunk_size: int = 10_000,
                   progress: Callable[[int, int, float], None] | None = None) -> dict:
    """Encodes any number of sequences into ``.npy`` files of means (and log variances), streaming.

    Row ``i`` of each file belongs to the ``i``-th sequence of ``data``, whatever happens to the
    others: a sequence the run cannot encode (an invalid SMILES, a token not in the vocabulary,
    longer than ``max_len``, no SELFIES for it) gets a row of NaN, is counted by kind, and the
    first five are named by line (``strict``: the first is an error instead). A library of
    millions is not lost to one odd line, and its rows stay aligned with its lines.

    ``data`` is read ``chunk_size`` sequences at a time (``sources.iter_sequences``); each chunk is
    encoded in batches of sequences of similar length, each batch cut to its longest sequence (an
    encoder reads up to the first ``<pad>``, so this changes no value), and its rows are appended
    to the files in input order (``files.NpyRowWriter``). TensorFlow encodes one chunk on a
    second thread while this one reads and checks the next (27% more molecules a second for a
    Kekule run on 2 cores than one after the other). Memory holds two chunks, whatever the
    input's size.

    Args:
      run: the loaded run.
      data: path, ``moses:SPLIT`` or list, as ``sources.read_sequences``.
      out: ``.npy`` path for the means, float32 ``(N, latent_dim)``.
      log_var_out: ``.npy`` path for the log variances, or None.
      progress: called after each chunk with (sequences read, an upper bound of the total, rows
        encoded per second so far).

    Returns:
      ``{"rows", "encoded", "skipped", "skipped_by_kind", "seconds", "per_second", "messages"}``:
      rows written (one per sequence), rows encoded, NaN rows, their count per kind (see
      ``EncodedTexts``), seconds, rows per second, and the first five NaN rows' messages.

    Raises:
      SeqvaeError: ``strict`` and a sequence cannot be encoded, or no sequence can be.
    """
    from collections import Counter

    from seqvae.files import NpyRowWriter

    latent = run.config.model.latent_dim
    encoder = compiled_encoder(run)
    total = sources.count_records(data, run.config.data.column)
    kinds, messages, started = Counter(), [], time.monotonic()
    with contextlib.ExitStack() as stack:
        writers = [stack.enter_context(NpyRowWriter(path, latent))
                   for path in (out, log_var_out) if path]
        # TensorFlow encodes a chunk on this thread (it lets go of the GIL) while the main
        # thread reads and tokenizes the next one (RDKit, Python): one chunk ahead at most.
        encoding = stack.enter_context(concurrent.futures.ThreadPoolExecutor(1))
        stack.callback(encoding.shutdown, cancel_futures=True)
        pending = None

        def write(pending) -> None:
            future, encoded, count = pending
            for writer, values in zip(writers, future.result()):
                rows = np.full((count, latent), np.nan, np.float32)
                rows[encoded.kept] = values
                writer.write(rows)
            kinds.update(kind for _, kind, _ in encoded.problems)
            messages.extend(encoded.messages[:5 - len(messages)])
            if progress is not None:
                rate = writers[0].rows / max(time.monotonic() - started, 1e-9)
                progress(writers[0].rows, max(total, writers[0].rows), rate)

        for seqs in sources.iter_sequences(data, run.config.data.column, chunk_size):
            encoded = encode_texts(run.codec, seqs.texts, on_error="raise" if strict else "skip",
                                   source=seqs.source, line_numbers=seqs.line_numbers,
                                   check_molecules=not seqs.source.startswith("moses:"))
            if pending is not None:
                write(pending)
            pending = (encoding.submit(_encode_by_length, encoder, encoded.ids, encoded.lengths,
                                       batch_size, latent), encoded, len(seqs.texts))
        if pending is not None:
            write(pending)
        rows = writers[0].rows
        if rows == sum(kinds.values()):
            raise SeqvaeError(f"{data}: nothing to encode (no line can be encoded by this run)")
    seconds = time.monotonic() - started
    return {"rows": rows, "encoded": rows - sum(kinds.values()), "skipped": sum(kinds.values()),
            "skipped_by_kind": dict(kinds), "seconds": seconds,
            "per_second": rows / max(seconds, 1e-9), "messages": messages}


def _encode_by_length(encoder, ids: np.ndarray, lengths: np.ndarray, batch_size: int,
                      latent_dim: int):
    """``(z_mean, z_log_var)`` float32 ``(N, L)`` of ``ids (N, T)``, in input order, computed on
    batches of similar length cut to their longest row."""
    order = np.argsort(lengths, kind="stable")
    means = np.empty((len(ids), latent_dim), np.float32)
    log_vars = np.empty_like(means)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        longest = int(lengths[rows].max())
        mean, log_var = encoder(tf.constant(ids[rows, :longest]))
        means[rows], log_vars[rows] = mean.numpy(), log_var.numpy()
    return means, log_vars


def reconstruct(run: Run, data, num_samples: int = 10, seed: int = 0, strict: bool = False,
                batch_size: int = 1000, grammar: bool = True, beam_width: int = 0) -> dict:
    """Reconstruction accuracy, decoding greedily (free-running, not teacher-forced).

    ``token_accuracy``: fraction of real positions (tokens and ``<eos>``) where the decoded id
    equals the input id; ``sequence_accuracy``: fraction of sequences decoded exactly. Reported
    from ``z = mean`` and averaged over ``num_samples`` draws ``z ~ q(z|x)``; ``beam_width`` > 1
    decodes by beam search instead of greedily.
    """
    encoded = encode_ids(run, data, strict, skip=not strict)
    if encoded.problems:  # a measure over a data set: what the run cannot write is left out
        kinds = Counter(kind for _, kind, _ in encoded.problems)
        print(f"seqvae: reconstruction leaves out {len(encoded.problems)} sequences the run "
              f"cannot encode ({', '.join(f'{n} {kind}' for kind, n in kinds.items())}; first: "
              f"{encoded.messages[0]}); --strict stops at the first", file=sys.stderr)
    ids = encoded.ids
    mean, log_var = encode_batches(run, ids, batch_size)
    mask = ids != PAD_ID
    decode_ids = compiled_decoder(run, grammar=grammar, beam_width=beam_width)

    def decoded(z):
        return np.concatenate([decode_ids(tf.constant(z[s:s + batch_size]), tf.constant([0, 0])).numpy()
                               for s in range(0, len(z), batch_size)])

    def accuracy(z, out=None):
        out = decoded(z) if out is None else out
        same = (out == ids) | ~mask
        return float((same & mask).sum() / mask.sum()), float(same.all(axis=1).mean())

    from_mean = decoded(mean)
    token_mean, seq_mean = accuracy(mean, from_mean)
    exact = same_texts(run, ids_to_texts(run.codec, ids), ids_to_texts(run.codec, from_mean))
    sampled = []
    for i in range(num_samples):
        eps = randomness.normal(mean.shape, randomness.fold_in(randomness.as_seed(seed), i)).numpy()
        sampled.append(accuracy(mean + np.exp(0.5 * log_var) * eps))
    return {"sequences": len(ids), "left_out": len(encoded.problems),
            "decoding": f"beam {beam_width}" if beam_width > 1 else "greedy",
            "exact_match_mean_z": float(np.mean(exact)),
            "token_accuracy_mean_z": token_mean,
            "sequence_accuracy_mean_z": seq_mean, "samples_per_sequence": num_samples,
            "token_accuracy_sampled_z": float(np.mean([a for a, _ in sampled])) if sampled else None,
            "sequence_accuracy_sampled_z": float(np.mean([b for _, b in sampled])) if sampled else None}


def same_texts(run: Run, inputs: list[str], outputs: list[str]) -> np.ndarray:
    """bool ``(N,)``: output i is input i, as canonical SMILES for molecule runs (another
    spelling of the same molecule counts), as text otherwise."""
    if not run.codec.molecules:
        return np.array([a == b for a, b in zip(inputs, outputs)], bool)
    from rdkit import rdBase

    from seqvae.data.chemistry import canonical_smiles

    with rdBase.BlockLogs():
        return np.array([canonical_smiles(b) is not None and canonical_smiles(a) == canonical_smiles(b)
                         for a, b in zip(inputs, outputs)], bool)


def interpolate(run: Run, start: str, end: str, steps: int = 10, slerp: bool = False,
                grammar: bool = True, beam_width: int = 0) -> list[tuple[float, str]]:
    """Decodes ``steps`` points on the path between the encodings (means) of two sequences."""
    return interpolate_pairs(run, [(start, end)], steps, slerp, grammar, beam_width)[0]


def interpolate_pairs(run: Run, pairs: list[tuple[str, str]], steps: int = 10,
                      slerp: bool = False, grammar: bool = True,
                      beam_width: int = 0) -> list[list[tuple[float, str]]]:
    """``interpolate`` for many pairs in one decoding: a path of ``(t, text)`` per pair."""
    if steps < 2:
        raise SeqvaeError("--steps must be at least 2")
    mean, _ = encode(run, [text for pair in pairs for text in pair], strict=True)
    ts = np.linspace(0.0, 1.0, steps)
    points = np.concatenate([latent_path(mean[2 * i], mean[2 * i + 1], ts, slerp)
                             for i in range(len(pairs))])
    texts = decode(run, points, grammar=grammar, beam_width=beam_width)
    return [list(zip(ts.tolist(), texts[i * steps:(i + 1) * steps])) for i in range(len(pairs))]


def latent_path(a: np.ndarray, b: np.ndarray, ts: np.ndarray, slerp: bool) -> np.ndarray:
    """Points ``(len(ts), L)`` from a to b: linear, or spherical (slerp)."""
    if slerp:
        cos = np.dot(a, b) / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12)
        omega = np.arccos(np.clip(cos, -1.0, 1.0))
        if omega >= 1e-6:
            return np.stack([(np.sin((1 - t) * omega) * a + np.sin(t * omega) * b) / np.sin(omega)
                             for t in ts])
    return np.stack([(1 - t) * a + t * b for t in ts])
