"""What one step of the SMILES grammar state machine costs, in the graph and compiled by XLA.

    python bench/grammar_step_cost.py runs/demo --batch 1000 --steps 45

The mask's share of sampling time (``bench/grammar_throughput.py``) is the state machine's
``update`` and ``allowed`` at every decoding step: many small integer ops on ``(B, V)`` and
``(B, R)`` tensors. This times both in a ``tf.while_loop`` over random tokens of the run's
vocabulary, once as a plain ``tf.function`` (how small batches and the SavedModel run them) and
once with ``jit_compile=True`` (XLA fuses the small ops: how sampling runs batches of 256 rows
or more now), after a warm-up call of each, and prints
milliseconds per step. Same masks either way (integer logic); checked here too.
Then what rejection sampling runs a step now: ``update`` alone (the decoder that
reads the grammar runs it anyway) and ``update`` with ``rejection_check`` of the drawn token
(``allowed`` for one token a row, not V), plain and with the check under XLA.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", nargs="?", default="runs/demo")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=45, help="decoding steps (tokens)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from seqvae.model.grammar import SmilesGrammar
    from seqvae.run import load_run

    grammar = SmilesGrammar.from_tokens(load_run(args.run_dir).vocab.tokens)
    batch, steps, vocab = args.batch, args.steps, grammar.vocab_size

    def masks(tokens):  # (T, B) -> the OR of the T masks (B, V)
        def body(t, state, seen):
            state = grammar.update(state, tokens[t])
            return t + 1, state, seen | grammar.allowed(state, steps + 10)

        start = (0, grammar.initial_state(batch), tf.zeros([batch, vocab], tf.bool))
        return tf.while_loop(lambda t, *_: t < steps, body, start)[2]

    def checks(tokens, compiled):  # rejection's work: update, is the next drawn token allowed?
        check = grammar.rejection_check(batch, steps + 10, compiled=compiled)

        def body(t, state, rejected):
            state = grammar.update(state, tokens[t])
            return t + 1, state, rejected | check(tokens[t + 1], (state,))

        start = (0, grammar.initial_state(batch), tf.zeros([batch], tf.bool))
        return tf.while_loop(lambda t, *_: t < steps - 1, body, start)[2]

    def updates(tokens):  # what the decoder that reads the grammar runs anyway
        def body(t, state):
            return t + 1, grammar.update(state, tokens[t])

        state = tf.while_loop(lambda t, *_: t < steps, body, (0, grammar.initial_state(batch)))[1]
        return tf.add_n([tf.reduce_sum(value) for value in state.values()])  # every field used

    def timed(function, tokens):
        out = function(tokens).numpy()  # traces, compiles
        started = time.perf_counter()
        for _ in range(args.repeats):
            function(tokens).numpy()
        return out, (time.perf_counter() - started) / args.repeats / steps * 1000

    tokens = tf.constant(np.random.default_rng(0).integers(3, vocab, (steps, batch)), tf.int32)
    results = {}
    for name, jit in (("tf.function", False), ("XLA", True)):
        results[name], ms = timed(tf.function(masks, jit_compile=jit), tokens)
        print(f"mask (update + allowed), {name}: {ms:.2f} ms a step ({batch} rows, {steps} steps)")
    assert (results["tf.function"] == results["XLA"]).all(), "XLA's masks differ"
    _, ms = timed(tf.function(updates), tokens)
    print(f"update alone, tf.function: {ms:.2f} ms a step")
    rejected = {}
    for compiled_check in (False, True):
        rejected[compiled_check], ms = timed(
            tf.function(functools.partial(checks, compiled=compiled_check)), tokens)
        print(f"rejection (update + check of the drawn token), "
              f"{'XLA check' if compiled_check else 'tf.function'}: {ms:.2f} ms a step")
    assert (rejected[False] == rejected[True]).all(), "XLA's checks differ"
    return 0


if __name__ == "__main__":
    sys.exit(main())
