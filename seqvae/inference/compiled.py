"""The compiled decoders and encoder of a run, traced once per setting and kept on the run."""

from __future__ import annotations

from typing import Callable

import tensorflow as tf

from seqvae.model import decoding
from seqvae.run import Run


def cached(run: Run, key: tuple, build: Callable):
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

    return cached(run, ("decoder", greedy, float(temperature), top_k, masked, beam_width,
                         every_hypothesis, compiled_mask, reject), build)


def compiled_encoder(run: Run):
    """``ids (B, T) -> (z_mean, z_log_var)``, each ``(B, latent_dim)``, traced once per shape."""
    model = run.model
    return cached(run, ("encoder",), lambda: tf.function(
        lambda batch: model.encoder(batch, training=False), reduce_retracing=True,
        autograph=False))
