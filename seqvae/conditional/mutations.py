"""Kernel draws that rewrite one token of the kernel's molecule and let the decoder finish it.

A draw near a kernel decodes freely from a z near the molecule's posterior. A decoder that
reconstructs well then gives the kernel's own molecule (or an earlier hit) back, so the search
widens the kernel until the repeats thin, and the wider draws keep the asked-for properties less
often: on the demo, logP >= 3 with QED >= 0.85, a free draw at 1.6x gave a new hit 19% of the
time. A rewrite keeps the molecule up to a position in its second half (``REWRITE_FROM``),
writes there a token other than the molecule's own, drawn from the decoder's distribution at
that position (teacher-forced at the kernel's mean: the tokens the model finds likely there),
and decodes the rest from z: the result differs from the kernel molecule by construction and
keeps most of what made it a hit. On that target 41% of such draws were new hits (97% of the
hits distinct). A rewritten prefix the grammar rejects is not decoded as one: that draw is free.

``Rewrites`` keeps, for every kernel, its molecule's ids and the decoder's ``ALTERNATIVES``
likeliest other tokens at each position, computed once, the first time the kernel is drawn for a
rewrite. ``Modes`` decides, batch by batch, whether the kernels' draws are rewrites or free, by
the new molecules a second each has found.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from seqvae import inference
from seqvae.data.vocabulary import BOS_ID, EOS_ID, PAD_ID
from seqvae.inference import compiled as compiled_lib
from seqvae.run import Run

REWRITE_FROM = 0.5  # the rewritten token lies in this last share of the molecule's tokens
ALTERNATIVES = 4  # other tokens kept per position, the decoder's likeliest
TRIALS = 3  # batches each mode decodes before the faster is chosen (the first not counted)
EXPLORE = 0.15  # share of the later batches that decode in the slower mode
DECAY = 0.9  # weight of the earlier batches (of both modes) after each batch


def rewritable(run: Run) -> bool:
    """Whether the run's decoder gives a token's distribution given the tokens before it (a
    teacher-forced decoder), what a rewrite draws from."""
    return run.config.model.decoder_input == "teacher_forcing"


def alternatives(run: Run, ids: np.ndarray, means: np.ndarray, count: int = ALTERNATIVES
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The decoder's likeliest other tokens at each position of ``ids (N, T)``, z at ``means
    (N, L)``: ``(tokens int16 (N, T, count), weights float16 (N, T, count))``, the row's own
    token and ``<pad>``, ``<bos>``, ``<eos>`` left out (their weight 0)."""
    if not len(ids):
        return np.zeros(ids.shape + (count,), np.int16), np.zeros(ids.shape + (count,), np.float16)
    model = run.model

    def forward(batch, z):
        logits = model.decoder(z, model.decoder_inputs(batch), training=False,
                               seed=tf.zeros([2], tf.int32), features=model.decoder_features(batch))
        probabilities = tf.nn.softmax(tf.cast(logits, tf.float32))
        banned = tf.one_hot(batch, tf.shape(probabilities)[-1]) + tf.reduce_sum(tf.one_hot(
            [PAD_ID, BOS_ID, EOS_ID], tf.shape(probabilities)[-1]), axis=0)
        top = tf.math.top_k(probabilities * tf.cast(banned == 0, tf.float32), k=count)
        return top.indices, top.values

    compiled = compiled_lib.cached(run, ("rewrite_alternatives", count), lambda: tf.function(
        forward, reduce_retracing=True))
    tokens, weights = compiled(tf.constant(ids, tf.int32), tf.constant(means, tf.float32))
    return tokens.numpy().astype(np.int16), weights.numpy().astype(np.float16)


def rewrite(ids: np.ndarray, tokens: np.ndarray, weights: np.ndarray, rng: np.random.Generator,
            start: float = REWRITE_FROM) -> tuple[np.ndarray, np.ndarray]:
    """Each row of ``ids`` with one token rewritten, as a prefix to decode from.

    Args:
      ids: int ``(N, T)`` token ids, each row ``<eos>``-ended.
      tokens, weights: ``(N, T, K)`` the other tokens at each position and their weights
        (``alternatives``).
      rng: draws the position and the token.
      start: the position lies in the last ``1 - start`` of the row's tokens.

    Returns:
      ``(prefix int32 (N, T), lengths int32 (N,))``: row ``i`` is ``ids[i]`` with the token at a
      position ``p`` replaced by one of ``tokens[i, p]`` drawn by weight, and ``lengths[i] = p +
      1``; 0 where no other token has weight there (the row as it was, decoded freely).
    """
    prefix = np.array(ids, np.int32)
    counts = np.argmax(prefix == EOS_ID, axis=1)  # tokens before <eos>
    low = np.minimum((start * counts).astype(np.int64), np.maximum(counts - 1, 0))
    positions = low + np.floor(rng.random(len(prefix)) * (counts - low)).astype(np.int64)
    rows = np.arange(len(prefix))
    choice = np.array(weights[rows, positions], np.float64)  # (N, K)
    total = choice.sum(axis=1)
    usable = (counts > 0) & (total > 0)
    cumulative = np.cumsum(choice, axis=1) / np.where(total > 0, total, 1.0)[:, None]
    picked = np.minimum((cumulative < rng.random(len(prefix))[:, None]).sum(axis=1),
                        choice.shape[1] - 1)
    prefix[rows[usable], positions[usable]] = tokens[rows, positions, picked][usable]
    return prefix, np.where(usable, positions + 1, 0).astype(np.int32)


def grammatical(run: Run, prefix: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """bool ``(N,)``: whether the grammar allows each row's first ``lengths`` tokens (every row
    where the run has no grammar)."""
    if run.grammar is None or not len(prefix):
        return np.ones(len(prefix), bool)
    first = inference.first_violations(run, prefix, compiled=False)
    return (first < 0) | (first >= lengths)


class Rewrites:
    """Each kernel's molecule and, once it is drawn for a rewrite, the decoder's other tokens
    along it; rows in kernel order.

    Args:
      run: the run whose decoder rewrites.
      ids: int ``(K, T)`` the kernels' molecules.
      means: float ``(K, L)`` their posterior means.
    """

    def __init__(self, run: Run, ids: np.ndarray, means: np.ndarray):
        self.run = run
        self.ids = np.zeros((0, run.max_len), np.int32)
        self.means = np.zeros((0, run.config.model.latent_dim), np.float32)
        self.tokens = np.zeros((0, run.max_len, ALTERNATIVES), np.int16)
        self.weights = np.zeros((0, run.max_len, ALTERNATIVES), np.float16)
        self.ready = np.zeros(0, bool)
        self.add(ids, means)

    def add(self, ids: np.ndarray, means: np.ndarray) -> None:
        """The molecules of new kernels, in the order the kernels were added."""
        count = len(ids)
        self.ids = np.concatenate([self.ids, np.asarray(ids, np.int32)])
        self.means = np.concatenate([self.means, np.asarray(means, np.float32)])
        self.tokens = np.concatenate([self.tokens, np.zeros((count,) + self.tokens.shape[1:],
                                                            np.int16)])
        self.weights = np.concatenate([self.weights, np.zeros((count,) + self.weights.shape[1:],
                                                              np.float16)])
        self.ready = np.concatenate([self.ready, np.zeros(count, bool)])

    def draw(self, kernels: np.ndarray, rng: np.random.Generator
             ) -> tuple[np.ndarray, np.ndarray]:
        """``rewrite`` of the molecules of ``kernels`` (indices ``(N,)``, -1 for a draw from the
        prior: length 0), a rewritten prefix the grammar rejects given length 0 too."""
        prefix = np.zeros((len(kernels), self.ids.shape[1]), np.int32)
        lengths = np.zeros(len(kernels), np.int32)
        rows = np.flatnonzero(kernels >= 0)
        if len(rows):
            chosen = kernels[rows]
            missing = np.unique(chosen[~self.ready[chosen]])
            if len(missing):
                self.tokens[missing], self.weights[missing] = alternatives(
                    self.run, self.ids[missing], self.means[missing])
                self.ready[missing] = True
            prefix[rows], lengths[rows] = rewrite(self.ids[chosen], self.tokens[chosen],
                                                  self.weights[chosen], rng)
            lengths[~grammatical(self.run, prefix, lengths)] = 0
        return prefix, lengths


class Modes:
    """Whether a batch's kernel draws decode freely (0) or rewritten (1): the one that has found
    more new molecules a second, measured on the batches each decoded (each one's first batch
    left out: it traces its decoder), the other tried in ``EXPLORE`` of the batches.

    A rewrite costs more than a free draw (the grammar's mask while decoding the rest, the
    decoder's alternatives for each new kernel), so it pays where free draws near the kernels
    rarely meet the conditions (the tails) and not where they often do.
    """

    def __init__(self, seed: int = 0):
        self.hits = np.zeros(2)
        self.seconds = np.zeros(2)
        self.batches = np.zeros(2, np.int64)
        self.rng = np.random.default_rng([seed, 0x40DE])

    def next(self) -> int:
        """The mode of the next batch: each tried for ``TRIALS`` batches first, then the faster,
        the other in ``EXPLORE`` of the batches."""
        untried = np.flatnonzero(self.batches < TRIALS)
        if len(untried):
            return int(untried[0])
        best = int(np.argmax(self.hits / np.maximum(self.seconds, 1e-9)))
        return best if self.rng.random() >= EXPLORE else 1 - best

    def record(self, mode: int, new: int, seconds: float) -> None:
        """A batch in ``mode`` found ``new`` new molecules in ``seconds``. Every batch weighs the
        earlier ones of both modes by ``DECAY``, so a mode's rate is that of its latest batches
        (the search changes as it learns: a rate measured at its start goes stale)."""
        if self.batches[mode]:
            self.hits *= DECAY
            self.seconds *= DECAY
            self.hits[mode] += new
            self.seconds[mode] += seconds
        self.batches[mode] += 1
