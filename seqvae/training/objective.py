"""The training objective: ``compute_losses`` composes the likelihood terms
(``seqvae.model.likelihood``), the KL schedule (``seqvae.training.schedules``), word dropout and
scheduled sampling on one batch.

Conventions: ``targets`` are token ids ``(B, T)`` with ``<pad>`` = 0 after the ``<eos>``;
``logits`` are ``(B, T, V)``. All reductions are stated exactly in each docstring.
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf

from seqvae.config import TrainConfig
from seqvae.data.vocabulary import BOS_ID, PAD_ID, UNK_ID
from seqvae.model import randomness
from seqvae.model.likelihood import constrained_logits, kl_per_dimension, sequence_cross_entropy
from seqvae.model.grammar import SmilesGrammar
from seqvae.model.property_head import property_loss
from seqvae.model.vae import SequenceVAE
from seqvae.training import schedules


def word_dropout(inputs: tf.Tensor, rate: float, seed: tf.Tensor, unk_id: int = UNK_ID,
                 keep_ids: tuple[int, ...] = (PAD_ID, BOS_ID)) -> tf.Tensor:
    """Replaces decoder input tokens by ``<unk>`` with probability ``rate`` (Bowman et al. 2016).

    Padding and ``<bos>`` are never replaced. Stateless: the same ``seed`` gives the same mask.

    Args:
      inputs: int ``(B, T)`` decoder input ids.
      rate: replacement probability.
      seed: int ``(2,)`` stateless seed.

    Returns:
      int ``(B, T)``.
    """
    if rate <= 0:
        return inputs
    drop = _replacement_mask(inputs, rate, seed, keep_ids)
    return tf.where(drop, tf.cast(unk_id, inputs.dtype), inputs)


def _replacement_mask(inputs: tf.Tensor, rate, seed: tf.Tensor,
                      keep_ids: tuple[int, ...]) -> tf.Tensor:
    """bool ``(B, T)``: each input chosen with probability ``rate`` (stateless), never one of
    ``keep_ids``."""
    chosen = randomness.uniform(tf.shape(inputs), seed) < rate
    for keep in keep_ids:
        chosen = chosen & tf.not_equal(inputs, keep)
    return chosen


def own_sample_inputs(inputs: tf.Tensor, logits: tf.Tensor, rate, seed: tf.Tensor,
                      keep_ids: tuple[int, ...] = (PAD_ID, BOS_ID)) -> tf.Tensor:
    """Scheduled sampling's inputs: each decoder input is, with probability ``rate``, replaced by
    a token drawn from the model's own distribution at the step before.

    Input ``t >= 1`` is the true token ``t - 1``; its replacement is a draw (temperature 1,
    Gumbel-max) from ``softmax(logits[:, t - 1])``, the prediction of that token made with the
    true inputs. Padding and ``<bos>`` are never replaced. The draw is an integer: no gradient
    flows through it. Stateless: the same ``seed`` gives the same inputs.

    Args:
      inputs: int ``(B, T)`` decoder input ids (``<bos>``, x_0 .. x_{T-2}).
      logits: float ``(B, T, V)`` the teacher-forced decoder's logits for these inputs.
      rate: replacement probability, a float or a scalar tensor.
      seed: int ``(2,)`` stateless seed.

    Returns:
      int ``(B, T)``.
    """
    shape = tf.shape(inputs)
    previous = tf.reshape(logits[:, :-1], [-1, tf.shape(logits)[-1]])  # (B (T-1), V)
    drawn = randomness.categorical(tf.stop_gradient(previous), randomness.fold_in(seed, 0))
    drawn = tf.concat([inputs[:, :1], tf.reshape(tf.cast(drawn, inputs.dtype),
                                                 [shape[0], shape[1] - 1])], axis=1)
    replace = _replacement_mask(inputs, rate, randomness.fold_in(seed, 1), keep_ids)
    return tf.where(replace, drawn, inputs)


def compute_losses(model: SequenceVAE, ids: tf.Tensor, step: tf.Tensor, config: TrainConfig,
                   total_steps: int, training: bool = True,
                   shard: tuple[tf.Tensor, tf.Tensor, tf.Tensor] | None = None,
                   sum_replicas: Callable[[tf.Tensor], tf.Tensor] | None = None,
                   grammar: SmilesGrammar | None = None, max_len: int = 0,
                   targets: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
    """The training objective on one batch: ``recon_term + kl_weight * KL``.

    ``kl`` is summed over latent dimensions and averaged over the batch. ``recon`` (logged) is the
    mean cross-entropy per real token. The loss's reconstruction term follows
    ``config.kl_reduction``: ``per_token`` (MOSES) uses ``recon``, so the KL weight per molecule
    is ``kl_weight`` times its number of tokens; ``per_molecule`` uses the cross-entropy summed
    over each molecule's tokens and averaged over the batch, so ``kl_weight`` is the beta of the
    per-molecule ELBO whatever the lengths (``kl_weight = 1`` is the ELBO itself).
    Randomness is seeded by ``step``.

    Args:
      shard: ``(row offset, global rows, global real tokens)`` when ``ids`` is one replica's
        slice of a global batch (``distribute.replica_shard``): every term is then this slice's
        share of the global-batch average (the shares sum to the global loss), and z's noise is
        the slice's rows of the global batch's noise.
      sum_replicas: with ``shard``, the sum of a tensor over all replicas (the step passes
        ``ReplicaContext.all_reduce``); free bits need the global per-dimension KL.
      grammar: a SMILES grammar for ``train.grammar_softmax``: the likelihood is then taken
        over the tokens it allows after each target prefix (``constrained_logits``), with room
        for ``max_len`` tokens, as masked decoding sees them.
      targets: float ``(B, P)`` standardised properties (NaN where unknown) for a model with a
        property head: its MSE (``property`` in the outputs) joins the loss weighted against the
        reconstruction term as the chemical VAE weighs it against the mean cross-entropy per
        token: ``config.property_weight`` with ``per_token``, and that times the batch's mean
        tokens per molecule with ``per_molecule`` (whose reconstruction term is summed over
        each molecule's tokens), so that 0.5 means the chemical VAE's balance in both.
    """
    seed = randomness.fold_in(randomness.as_seed(config.seed), step)
    rows = tf.shape(ids)[0]
    if shard is None:
        shard = (tf.constant(0), rows, tf.reduce_sum(tf.cast(tf.not_equal(ids, PAD_ID), tf.float32)))
    offset, global_rows, global_tokens = shard
    decoder_inputs = model.decoder_inputs(ids)
    if training and config.word_dropout > 0:
        decoder_inputs = word_dropout(decoder_inputs, config.word_dropout,
                                      randomness.fold_in(seed, 2))
    noise = randomness.normal([global_rows, model.config.latent_dim], randomness.fold_in(seed, 0))
    out = model(ids, training=training, seed=seed, decoder_inputs=decoder_inputs,
                z_noise=noise[offset:offset + rows])
    logits = out["logits"]
    if (training and config.scheduled_sampling > 0
            and model.config.decoder_input == "teacher_forcing"):
        # Second pass on the same z with some inputs drawn from the first pass's predictions;
        # only this pass is differentiated (the draws are integers).
        rate = schedules.own_sample_rate(step, config, total_steps)
        decoder_inputs = own_sample_inputs(decoder_inputs, logits, rate, randomness.fold_in(seed, 3))
        logits = model.decoder(out["z"], decoder_inputs, training=training,
                               seed=randomness.fold_in(seed, 1))
    if grammar is not None:
        logits = constrained_logits(logits, grammar.teacher_forced_masks(ids, max_len))
    recon_sum = tf.reduce_sum(sequence_cross_entropy(ids, logits))
    recon = recon_sum / tf.maximum(global_tokens, 1.0)
    global_rows = tf.cast(global_rows, tf.float32)
    recon_term = recon if config.kl_reduction == "per_token" else recon_sum / global_rows
    kl_dims = kl_per_dimension(out["z_mean"], out["z_log_var"]) * (
        tf.cast(rows, tf.float32) / global_rows)  # this slice's share of the batch mean
    kl = tf.reduce_sum(kl_dims)
    penalised_kl = kl
    if config.free_bits > 0:  # max(KL_d, free_bits) on the global per-dimension mean
        whole = kl_dims if sum_replicas is None else sum_replicas(tf.stop_gradient(kl_dims))
        share = kl_dims / tf.maximum(tf.stop_gradient(whole), 1e-12)
        penalised_kl = tf.reduce_sum(tf.where(tf.stop_gradient(whole) >= config.free_bits, kl_dims,
                                              config.free_bits * tf.stop_gradient(share)))
    kl_weight = schedules.kl_weight(step, config, total_steps)
    losses = {"loss": recon_term + kl_weight * penalised_kl, "recon": recon, "kl": kl,
              "kl_weight": tf.cast(kl_weight, tf.float32)}
    if targets is not None and "properties" in out:
        losses["property"] = property_loss(targets, out["properties"])
        weight = config.property_weight * (1.0 if config.kl_reduction == "per_token"
                                           else global_tokens / global_rows)
        losses["loss"] += weight * losses["property"]
    return losses
