"""Decoding under the SMILES grammar: the decoder's step function wrapped with the grammar's
state machine, so that each step's logits see the mask of the allowed tokens (``masked_step_fn``),
a row stops at its first forbidden token (``rejection_check``), or a decoder reading the grammar
gets its state (``stepper``); batches of many rows run the state machine under XLA."""

from __future__ import annotations

import functools
from typing import Any, Callable

import tensorflow as tf

from seqvae.data.vocabulary import EOS_ID

# Decoding batches from this many rows on run the state machine under XLA
# (``SmilesGrammar.masked_step_fn``).
COMPILED_MIN_ROWS = 256


class GrammarDecoding:
    """The decoding half of ``SmilesGrammar`` (a mixin: it uses the state machine's
    ``initial_state``, ``update`` and ``allowed``)."""

    def masked_step_fn(self, step_fn, state: Any, batch_size: int | tf.Tensor,
                       max_len: int, compiled: bool = False,
                       reject: bool = False) -> tuple[Any, Any]:
        """Wraps a decoding step function so that forbidden tokens get -inf logits.

        With ``reject``, the logits stay as the model gives them and the step only advances the
        grammar's state, the last member of its state, for ``rejection_check``: the decoding
        loop stops a row at its first forbidden token (rejection sampling,
        ``decoding.sample_from_z``).

        Args:
          step_fn: ``(tokens (B,), state) -> (logits (B, V), state)``.
          state: its initial state.
          batch_size: B.
          max_len: the decoding length (the grammar keeps room to close what is open).
          compiled: run the state machine's step (``update`` and ``allowed``: some hundred
            small integer ops) as one XLA computation, its rows padded to B so that the
            compacting loop's shrinking batch compiles once (5-7x faster a step than the plain
            graph, the same masks: ``bench/grammar_step_cost.py``). False keeps plain graph ops
            (the exported SavedModel: it then runs where TensorFlow has no XLA JIT).

        Returns:
          ``(step_fn, state)`` for ``decode_loop``: the state pairs the inner state with the
          grammar's (all batch-major, so the compacting loop can drop finished rows; with
          ``compiled`` and no ``reject`` the grammar's fields are packed into one int32
          matrix, ``_pack``).
        """
        if reject:
            def advance(tokens, pair):
                logits, inner = step_fn(tokens, pair[0])
                return logits, (inner, self.update(pair[1], tokens))

            return advance, (state, self.initial_state(batch_size))
        initial, grammar_step, _ = self.stepper(batch_size, max_len, compiled)

        def step(tokens, pair):
            inner, grammar_state = pair
            grammar_state, allowed = grammar_step(grammar_state, tokens)
            logits, inner = step_fn(tokens, inner)
            logits = tf.where(allowed, logits, tf.constant(-1e9, logits.dtype))
            return logits, (inner, grammar_state)

        return step, (state, initial)

    @staticmethod
    def mask_from_state(step_fn, state: Any) -> tuple[Any, Any]:
        """``masked_step_fn`` for a step function that runs this grammar's ``stepper`` itself
        and keeps the tokens allowed next as the last member of its state (the decoder that
        reads the grammar, ``decoding.decoder_step_fn``): one state machine, not two."""
        def step(tokens, inner):
            logits, inner = step_fn(tokens, inner)
            return tf.where(inner[-1], logits, tf.constant(-1e9, logits.dtype)), inner

        return step, state

    def rejection_check(self, batch_size: int | tf.Tensor, max_len: int,
                        compiled: bool = False) -> Callable[[tf.Tensor, Any], tf.Tensor]:
        """The ``stop_fn`` of rejection decoding: ``(chosen int32 (B,), state) -> bool (B,)``,
        whether each row's drawn token is one the grammar forbids, for a decoding state whose
        last member is the grammar's state after the tokens before it (``masked_step_fn(...,
        reject=True)``, or the decoder that reads the grammar, ``decoding.decoder_step_fn``).

        It asks ``allowed`` about each row's own token, not the whole vocabulary: a dead end
        allows nothing, so it rejects what ``first_violation`` rejects. In plain ops a step of
        ``update`` and this check costs about half the full mask's; ``compiled`` runs the check
        under XLA (``_under_xla``), about as fast as the compiled mask
        (``bench/grammar_step_cost.py``).
        """
        def check(state, tokens):
            return self.allowed(state, max_len, tokens=tokens)

        if compiled:
            check = self._under_xla(check, batch_size)
        return lambda chosen, state: ~check(state[-1], chosen)

    def stepper(self, batch_size: int | tf.Tensor, max_len: int,
                compiled: bool = False) -> tuple[Any, Callable, Callable]:
        """The state machine as masked decoding steps it: ``(initial state, step(state, tokens
        (B,)) -> (state, allowed bool (B, V)), fields(state) -> the state's dict)``.

        ``compiled``: under XLA on a packed state (``_step`` through ``_under_xla``).
        """
        if compiled:  # the state as one int32 matrix: one op to pad, drop or gather rows
            def packed_step(packed, tokens):
                state, allowed = self._step(self._unpack(packed), tokens, max_len)
                return self._pack(state), allowed

            return (self._pack(self.initial_state(batch_size)),
                    self._under_xla(packed_step, batch_size), self._unpack)
        return (self.initial_state(batch_size), functools.partial(self._step, max_len=max_len),
                lambda s: s)

    def _pack(self, state: dict[str, tf.Tensor]) -> tf.Tensor:
        """The state as one int32 matrix ``(B, S)``: its fields side by side, in order."""
        return tf.concat([v[:, None] if v.shape.rank == 1 else v for v in state.values()], axis=1)

    def _unpack(self, packed: tf.Tensor) -> dict[str, tf.Tensor]:
        """``_pack``'s inverse."""
        state, column = {}, 0
        for name, value in self.initial_state(1).items():
            if value.shape.rank == 1:
                state[name] = packed[:, column]
                column += 1
            else:
                state[name] = packed[:, column:column + value.shape[1]]
                column += value.shape[1]
        return state

    def _step(self, state: dict[str, tf.Tensor], tokens: tf.Tensor,
              max_len: int) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        """One masked decoding step of the state machine: the state after ``tokens (B,)`` and
        the tokens allowed next, bool ``(B, V)``.

        A row with nothing allowed (a dead end the mask did not see coming: length or valence)
        may only emit ``<eos>``: it ends there and its text is counted invalid, not filled with
        garbage.
        """
        state = self.update(state, tokens)
        allowed = self.allowed(state, max_len)
        stuck = ~tf.reduce_any(allowed, -1, keepdims=True)
        return state, allowed | (stuck & tf.equal(tf.range(self.vocab_size), EOS_ID)[None, :])

    @staticmethod
    def _under_xla(function: Callable, batch_size: int | tf.Tensor) -> Callable:
        """``function(state, tokens (B,))`` (a nest of batch-major tensors in and out: some
        hundred small integer ops) compiled by XLA, for any number of rows up to ``batch_size``.

        XLA compiles once per input shape; the rows are padded to ``max(rows, B')``, B' the
        power of two from ``batch_size`` up (beam search has more rows than B), and the padding
        dropped again, so a decoding batch compiles once however its loop shrinks, and batches
        of other sizes (a sample's last, rejection's later rounds) rarely compile again. Padded
        rows are computed and thrown away: each row's state machine only reads its own row.
        Batches of a known size under ``COMPILED_MIN_ROWS`` rows keep the plain ops: there
        the compilation (about a second) costs more than the steps it saves. A batch whose size
        is known only when it runs is always compiled: its caller picks plain ops for small
        batches before the loop (``inference.decode_id_batches``), since a ``tf.cond`` at
        every step costs about as much as the XLA computation saves.
        """
        compiled = tf.function(function, jit_compile=True, reduce_retracing=True,
                               autograph=False)
        bucket = tf.cast(2 ** tf.math.ceil(tf.math.log(tf.cast(batch_size, tf.float32))
                                           / tf.math.log(2.0) - 1e-6), tf.int32)

        def padded(state, tokens):
            rows = tf.shape(tokens)[0]
            padding = tf.maximum(rows, bucket) - rows

            def pad(t):
                return tf.pad(t, [[0, padding]] + [[0, 0]] * (t.shape.rank - 1))

            out = compiled(tf.nest.map_structure(pad, state), pad(tokens))
            return tf.nest.map_structure(lambda t: t[:rows], out)

        def step(state, tokens):
            static_batch = tf.get_static_value(batch_size)
            if static_batch is not None and static_batch < COMPILED_MIN_ROWS:
                return function(state, tokens)
            if (static_batch is not None and tokens.shape[0] is not None
                    and tokens.shape[0] >= static_batch):
                return compiled(state, tokens)  # every row there (e.g. inside XLA): no padding
            return padded(state, tokens)

        return step
