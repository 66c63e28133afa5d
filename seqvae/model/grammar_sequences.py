"""The SMILES grammar along whole sequences: the decoder's view of its state (``features``), the
states and masks before each target under teacher forcing, and each sequence's first violation."""

from __future__ import annotations

import tensorflow as tf

from seqvae.data.vocabulary import BOS_ID
from seqvae.model.smiles_tokens import END, NUM_CLASSES


class GrammarAlongSequences:
    """The sequence half of ``SmilesGrammar`` (a mixin: it uses the state machine's
    ``initial_state``, ``update`` and ``allowed``)."""

    def features(self, state: dict[str, tf.Tensor], max_len: int | tf.Tensor) -> tf.Tensor:
        """What the decoder reads of the state: float32 ``(B, FEATURE_DIM)``: the previous
        token's class one-hot, then the open branches, the open ring labels, the pending bond's
        order, whether a branch just closed, the valence left on the atom a bond would attach
        to (each scaled by 1/4, clipped at 1) and the share of ``max_len`` left."""
        def scaled(x, by=4.0):
            return tf.minimum(tf.cast(x, tf.float32) / by, 1.0)

        at_attach = tf.one_hot(state["attach"], self.max_depth, dtype=tf.int32)
        current = tf.reduce_sum(at_attach * state["valence"], -1)
        room = 1.0 - tf.cast(state["position"], tf.float32) / tf.cast(max_len, tf.float32)
        return tf.concat([tf.one_hot(state["prev"], NUM_CLASSES, dtype=tf.float32),
                          tf.stack([scaled(state["depth"]),
                                    scaled(tf.reduce_sum(state["ring_open"], -1)),
                                    scaled(state["pending"], 3.0),
                                    scaled(state["after_close"], 1.0),
                                    scaled(current), room], axis=1)], axis=1)

    def teacher_forced_features(self, ids: tf.Tensor, max_len: int | tf.Tensor) -> tf.Tensor:
        """``features`` before each target of known sequences ``ids (B, T)`` (after ``<bos>``
        and the targets before it): float32 ``(B, T, FEATURE_DIM)``, what the decoder reads
        at each teacher-forced step."""
        return self._along_targets(ids, tf.float32,
                                   lambda state, target: self.features(state, max_len))

    def teacher_forced_masks(self, ids: tf.Tensor, max_len: int | tf.Tensor,
                             include_targets: bool = True) -> tf.Tensor:
        """The mask at every position of known sequences: what a constrained softmax keeps.

        Args:
          ids: int ``(B, T)`` targets (``<eos>`` then ``<pad>`` after each sequence).
          max_len: the decoding length the masks keep room for (the run's ``max_len``).
          include_targets: also allow each position's own target (see Returns); False gives
            the grammar's masks alone.

        Returns:
          bool ``(B, T, V)``: at position t, the tokens the grammar allows after ``ids[:, :t]``,
          and always ``ids[:, t]`` itself (padding, and a target the grammar would reject, keep
          a finite likelihood).
        """
        def mask(state, target):
            allowed = self.allowed(state, max_len)
            if include_targets:
                allowed = allowed | tf.cast(tf.one_hot(target, self.vocab_size, dtype=tf.int32),
                                            tf.bool)
            return allowed

        return self._along_targets(ids, tf.bool, mask)

    def _along_targets(self, ids: tf.Tensor, dtype: tf.DType, read) -> tf.Tensor:
        """Walks the state machine along known sequences ``ids (B, T)`` (after ``<bos>``) and
        stacks ``read(state, target)`` ``(B, ...)`` taken before each target -> ``(B, T, ...)``."""
        ids = tf.cast(ids, tf.int32)
        batch, length = tf.shape(ids)[0], tf.shape(ids)[1]
        by_time = tf.transpose(ids)  # (T, B)
        out = tf.TensorArray(dtype, size=length)
        state = self.update(self.initial_state(batch), tf.fill([batch], BOS_ID))

        def body(t, state, out):
            target = by_time[t]
            return t + 1, self.update(state, target), out.write(t, read(state, target))

        _, _, out = tf.while_loop(lambda t, *_: t < length, body, (0, state, out))
        return tf.transpose(out.stack(), [1, 0, 2])

    def first_violation(self, ids: tf.Tensor) -> tf.Tensor:
        """For token ids ``(B, T)`` (<eos> then <pad> after each sequence): the first position
        whose token the mask forbids, or -1 where every token is allowed -> int32 ``(B,)``.

        A ``tf.while_loop`` over the positions, as the samplers step (an unrolled Python loop
        made a graph of some 20,000 ops for the demo's ``max_len``: 15 s to trace and slow to
        run), asking ``allowed`` about each row's own token, as ``rejection_check`` does while
        decoding (``inference.first_violations``, ``bench/grammar_coverage.py``)."""
        ids = tf.cast(ids, tf.int32)
        batch, length = tf.shape(ids)[0], ids.shape[1] or tf.shape(ids)[1]
        by_time = tf.transpose(ids)  # (T, B)

        def body(t, state, tokens, first):
            state = self.update(state, tokens)
            tokens = by_time[t]
            ok = self.allowed(state, length, tokens=tokens)
            ok = ok | tf.equal(state["prev"], END)
            return t + 1, state, tokens, tf.where((first < 0) & ~ok, t, first)

        _, _, _, first = tf.while_loop(
            lambda t, *_: t < length, body,
            (tf.constant(0), self.initial_state(batch), tf.fill([batch], BOS_ID),
             tf.fill([batch], -1)))
        return first
