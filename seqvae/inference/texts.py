"""Decoding latent vectors into texts, in batches: greedy, sampled, beam search, with prefixes."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import tensorflow as tf

from seqvae.data.preparation import ids_to_texts
from seqvae.errors import SeqvaeError
from seqvae.inference import compiled as compiled_lib
from seqvae.model import randomness
from seqvae.model import grammar_decoding
from seqvae.run import Run


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
    hypotheses = compiled_lib.compiled_decoder(run, True, 1.0, 0, grammar, beam_width, every_hypothesis=True)
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
        decode_ids = compiled_lib.compiled_decoder(run, greedy, 1.0 if shared else temperature, top_k,
                                      grammar, beam_width, compiled_mask=compiled, reject=reject)
        trace_for_any_batch_size(decode_ids, run, len(extra), prefixed)
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
        compiled = compiled_mask and len(rows) >= grammar_decoding.COMPILED_MIN_ROWS
        if compiled not in decoders:
            decoders[compiled] = decoder(compiled)
        decoded = decoders[compiled](tf.constant(rows), randomness.fold_in(base, i), *extra,
                                     **forced)
        out(tf.nest.map_structure(lambda t: t.numpy(), decoded))
        done += len(rows)
        if progress is not None:
            rate = done / max(time.monotonic() - started, 1e-9)
            progress(f"{verb} {done}/{len(z)} ({rate:.0f}/s)")


def trace_for_any_batch_size(decode_ids, run: Run, temperatures: int, prefixed: bool) -> None:
    """Traces ``decode_ids`` (``compiled_decoder``) once for batches of any size, before its
    first call: a trace for the first batch's own size would be followed by another when a
    batch of a different size comes (a sample's last, rejection's later rounds: 1.2 s of a
    10,000-molecule demo sample). Later calls find the trace (a lookup)."""
    specs = [tf.TensorSpec([None, run.config.model.latent_dim], tf.float32),
             tf.TensorSpec([2], tf.int32)] + [tf.TensorSpec([], tf.float32)] * temperatures
    forced = {"prefix": tf.TensorSpec([None, None], tf.int32),
              "prefix_lengths": tf.TensorSpec([None], tf.int32)} if prefixed else {}
    decode_ids.get_concrete_function(*specs, **forced)
