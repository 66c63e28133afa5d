"""Graph-native decoding: one ``tf.while_loop`` over a ``tf.TensorArray`` for every strategy.

The loop is a function of a *step function* ``(tokens (B,), state) -> (logits (B, V), state)``
and a state, so it is tested with a stub and no trained model, and serves greedy decoding,
sampling with temperature and top-k, and beam search, from any z. The maximum length is fixed,
so the loop compiles under XLA; sequences that emitted ``<eos>`` are masked (they emit ``<pad>``), and the
loop stops as soon as every sequence has finished.
"""

from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf

from seqvae.data.vocabulary import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from seqvae.errors import SeqvaeError
from seqvae.model import randomness

StepFn = Callable[[tf.Tensor, Any], tuple[tf.Tensor, Any]]


def filter_logits(logits: tf.Tensor, temperature: float | tf.Tensor = 1.0,
                  top_k: int = 0) -> tf.Tensor:
    """Applies temperature and top-k to logits ``(B, V)``: kept scores / T, others -inf.

    A ``top_k`` of at least V keeps every score.
    """
    logits = tf.cast(logits, tf.float32) / tf.cast(temperature, tf.float32)
    if top_k and top_k > 0:
        if logits.shape[-1] is not None:
            top_k = min(top_k, logits.shape[-1])
        kth = tf.math.top_k(logits, k=top_k).values[:, -1:]
        logits = tf.where(logits < kth, tf.constant(float("-inf"), logits.dtype), logits)
    return logits


def check_sampling(temperature, top_k: int = 0) -> None:
    """The one check of sampling settings (the command line, the explorer and the decoding loop
    call it): a temperature >= 0 (0 = greedy) and a top-k >= 0 (0 = off); tensors pass."""
    if isinstance(temperature, (int, float)) and not temperature >= 0:
        raise SeqvaeError(f"the sampling temperature must be >= 0 (0 = greedy), got {temperature}")
    if isinstance(top_k, int) and top_k < 0:
        raise SeqvaeError(f"top_k must be >= 0 (0 = off), got {top_k}")


def decode_loop(step_fn: StepFn, state: Any, batch_size: tf.Tensor | int, max_len: int,
                start_id: int, eos_id: int, pad_id: int = PAD_ID, greedy: bool = False,
                temperature: float | tf.Tensor = 1.0, top_k: int = 0,
                seed: tf.Tensor | None = None, compact: bool = False,
                stop_fn: Callable[[tf.Tensor, Any], tf.Tensor] | None = None):
    """Generates token ids step by step.

    Args:
      step_fn: ``(tokens int32 (B,), state) -> (logits (B, V), new state)``; ``state`` is any
        nest of tensors whose shapes do not change.
      state: initial state (e.g. the decoder's layer states).
      batch_size: B.
      max_len: maximum number of generated tokens (``<eos>`` included).
      start_id: token fed at the first step (``<bos>``).
      eos_id, pad_id: a sequence that emits ``eos_id`` is finished and then emits ``pad_id``.
      greedy: argmax instead of sampling.
      temperature, top_k: sampling controls (ignored when greedy; temperature 0 = greedy;
        top_k 0 = off).
      seed: int ``(2,)`` stateless seed; the same seed gives the same samples.
      compact: drop finished sequences from the batch (faster; not under XLA; needs a state of
        batch-major tensors). The samples are the same either way.
      stop_fn: ``(chosen int32 (B,), state after the step) -> bool (B,)``: rows to stop at this
        token (kept as their last), as ``<eos>`` stops them (rejection sampling stops a row at
        its first token the grammar forbids: ``SmilesGrammar.rejection_check``).

    Returns:
      int32 ``(B, max_len)``: the tokens, ``<eos>`` included, ``<pad>`` after it; with
      ``stop_fn``, also bool ``(B,)``: the rows it stopped.
    """
    check_sampling(temperature, top_k)
    greedy = greedy or (isinstance(temperature, (int, float)) and temperature == 0)
    if seed is None:
        seed = tf.constant([0, 0], tf.int32)
    tokens = tf.fill([batch_size], tf.constant(start_id, tf.int32))
    finished = tf.zeros([batch_size], tf.bool)
    stopped = tf.zeros([batch_size], tf.bool)
    out = tf.TensorArray(tf.int32, size=max_len, element_shape=tf.TensorShape([None]))

    def body(t, tokens, finished, stopped, state, out):
        logits, state = step_fn(tokens, state)
        if greedy:
            chosen = tf.argmax(logits, axis=-1, output_type=tf.int32)
        else:
            chosen = randomness.categorical(filter_logits(logits, temperature, top_k),
                                            randomness.fold_in(seed, t))
        chosen = tf.where(finished, pad_id, chosen)
        if stop_fn is not None:
            stopped = stopped | (stop_fn(chosen, state) & ~finished)
        finished = finished | tf.equal(chosen, eos_id) | stopped
        return t + 1, chosen, finished, stopped, state, out.write(t, chosen)

    if compact:
        out, stopped = _compacting_loop(step_fn, state, batch_size, max_len, start_id, eos_id,
                                        pad_id, greedy, temperature, top_k, seed, stop_fn)
        return out if stop_fn is None else (out, stopped)
    steps, _, _, stopped, _, out = tf.while_loop(
        lambda t, tokens, finished, *_: (t < max_len) & ~tf.reduce_all(finished),
        body, (tf.constant(0), tokens, finished, stopped, state, out), maximum_iterations=max_len)
    padding = tf.fill([batch_size], tf.constant(pad_id, tf.int32))
    _, out = tf.while_loop(lambda t, _: t < max_len, lambda t, out: (t + 1, out.write(t, padding)),
                           (steps, out), maximum_iterations=max_len)
    out = tf.transpose(out.stack())
    return out if stop_fn is None else (out, stopped)


def _compacting_loop(step_fn, state, batch_size, max_len, start_id, eos_id, pad_id, greedy,
                     temperature, top_k, seed, stop_fn=None):
    """``decode_loop`` that drops finished (and stopped) sequences from the batch after every
    step -> ``(ids, stopped)``.

    The step function then only computes on unfinished rows (the state must be a nest of
    batch-major tensors). The sampling noise of a row is drawn for its original index, so the
    samples equal the fixed-shape loop's. Shapes change inside the loop: not for XLA.
    """
    rows = tf.range(batch_size)
    tokens = tf.fill([batch_size], tf.constant(start_id, tf.int32))
    out = tf.fill([batch_size, max_len], tf.constant(pad_id, tf.int32))
    stopped = tf.zeros([batch_size], tf.bool)

    def body(t, tokens, rows, state, out, stopped):
        logits, state = step_fn(tokens, state)
        if greedy:
            chosen = tf.argmax(logits, axis=-1, output_type=tf.int32)
        else:
            filtered = filter_logits(logits, temperature, top_k)
            chosen = randomness.categorical(filtered, randomness.fold_in(seed, t),
                                            rows=rows, total_rows=batch_size)
        out = tf.tensor_scatter_nd_update(out, tf.stack([rows, tf.fill(tf.shape(rows), t)], 1), chosen)
        keep = tf.not_equal(chosen, eos_id)
        if stop_fn is not None:
            stop = stop_fn(chosen, state)
            stopped = tf.tensor_scatter_nd_update(stopped, rows[:, None], stop)
            keep &= ~stop
        state = tf.nest.map_structure(lambda s: tf.boolean_mask(s, keep), state)
        return (t + 1, tf.boolean_mask(chosen, keep), tf.boolean_mask(rows, keep), state, out,
                stopped)

    invariants = tf.nest.map_structure(
        lambda s: tf.TensorShape([None]).concatenate(s.shape[1:]), state)
    _, _, _, _, out, stopped = tf.while_loop(
        lambda t, tokens, rows, *_: (t < max_len) & (tf.size(rows) > 0),
        body, (tf.constant(0), tokens, rows, state, out, stopped),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None]), tf.TensorShape([None]),
                          invariants, tf.TensorShape([None, max_len]), tf.TensorShape([None])),
        maximum_iterations=max_len)
    return out, stopped


def beam_search(step_fn: StepFn, state: Any, batch_size: tf.Tensor | int, max_len: int,
                beam_width: int, start_id: int, eos_id: int, pad_id: int = PAD_ID,
                length_penalty: float = 1.0, every: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
    """Beam search over a step function, in one ``tf.while_loop`` (graph, XLA-friendly shapes).

    Every row keeps ``beam_width`` hypotheses ranked by their summed log-probability; a finished
    hypothesis (it emitted ``<eos>``) keeps its score and emits ``<pad>``. At the end each row
    returns its hypothesis with the best length-normalised score ``sum log p / length **
    length_penalty`` (length counts ``<eos>``).

    Args:
      step_fn, state: as ``decode_loop``; the state must be batch-major (rows are gathered as
        hypotheses move between beams), which also carries a grammar mask's state.
      batch_size: B.
      max_len: maximum number of generated tokens (``<eos>`` included).
      beam_width: K hypotheses per row.
      start_id, eos_id, pad_id: as ``decode_loop``.
      length_penalty: 0 ranks by total log-probability, 1 by the mean per token.
      every: return all K hypotheses of each row, best first.

    Returns:
      ``(ids int32 (B, max_len), scores float32 (B,))``: the best hypothesis of each row and
      its normalised score; with ``every``, ``(ids (B, K, max_len), scores (B, K))``.
    """
    if beam_width < 1:
        raise SeqvaeError(f"the beam width must be >= 1, got {beam_width}")
    k = beam_width
    state = tf.nest.map_structure(lambda s: tf.repeat(s, k, axis=0), state)  # (B*K, ...)
    neg_inf = tf.constant(-1e30, tf.float32)
    # Only the first beam is live at the start, so the K first choices differ.
    scores = tf.tile(tf.concat([[0.0], tf.fill([k - 1], neg_inf)], 0)[None, :], [batch_size, 1])
    tokens = tf.fill([batch_size * k], tf.constant(start_id, tf.int32))
    finished = tf.zeros([batch_size, k], tf.bool)
    lengths = tf.zeros([batch_size, k], tf.int32)
    sequences = tf.fill([batch_size, k, max_len], tf.constant(pad_id, tf.int32))
    offsets = tf.range(batch_size)[:, None] * k  # (B, 1): first hypothesis row of each batch row

    def body(t, tokens, state, scores, finished, lengths, sequences):
        logits, state = step_fn(tokens, state)
        vocab = tf.shape(logits)[-1]
        log_probs = tf.reshape(tf.nn.log_softmax(tf.cast(logits, tf.float32)), [batch_size, k, -1])
        only_pad = tf.where(tf.equal(tf.range(vocab), pad_id), 0.0, neg_inf)  # finished: <pad>
        log_probs = tf.where(finished[:, :, None], only_pad[None, None, :], log_probs)
        candidates = tf.reshape(scores[:, :, None] + log_probs, [batch_size, -1])  # (B, K*V)
        scores, chosen = tf.math.top_k(candidates, k=k)
        parent, token = chosen // vocab, chosen % vocab  # (B, K)
        rows = tf.reshape(offsets + parent, [-1])
        state = tf.nest.map_structure(lambda s: tf.gather(s, rows), state)
        was_finished = tf.gather(finished, parent, batch_dims=1)
        lengths = tf.gather(lengths, parent, batch_dims=1) + tf.cast(~was_finished, tf.int32)
        finished = was_finished | tf.equal(token, eos_id)
        sequences = tf.gather(sequences, parent, batch_dims=1)
        at_t = tf.equal(tf.range(max_len), t)[None, None, :]
        sequences = tf.where(at_t, token[:, :, None], sequences)
        return t + 1, tf.reshape(token, [-1]), state, scores, finished, lengths, sequences

    def rows_vary(shape):  # the batch dimension as the loop sees it: not always static
        return tf.TensorShape([None]).concatenate(shape[1:])

    _, _, _, scores, finished, lengths, sequences = tf.while_loop(
        lambda t, _tokens, _state, _scores, finished, *_: (t < max_len) & ~tf.reduce_all(finished),
        body, (tf.constant(0), tokens, state, scores, finished, lengths, sequences),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None]),
                          tf.nest.map_structure(lambda s: rows_vary(s.shape), state),
                          *(rows_vary(v.shape) for v in (scores, finished, lengths, sequences))),
        maximum_iterations=max_len)
    normalised = scores / tf.pow(tf.cast(tf.maximum(lengths, 1), tf.float32), length_penalty)
    if every:
        normalised, order = tf.math.top_k(normalised, k=k)
        return tf.gather(sequences, order, batch_dims=1), normalised
    best = tf.argmax(normalised, axis=1, output_type=tf.int32)
    return (tf.gather(sequences, best, batch_dims=1),
            tf.gather(normalised, best, batch_dims=1))


def decoder_step_fn(decoder, z: tf.Tensor,
                    banned_ids: tuple[int, ...] = (PAD_ID, BOS_ID, UNK_ID),
                    stepper: tuple | None = None) -> tuple[StepFn, list[tf.Tensor]]:
    """Wraps a ``seqvae.model.Decoder`` conditioned on ``z (B, L)`` as a step function + state.

    z's share of the first layer's input projection is computed once here, not at every step.
    ``banned_ids`` (``<pad>``, ``<bos>``, ``<unk>``) can never be generated: they are never
    training targets, and an emitted ``<unk>`` would only make the text invalid.
    ``stepper`` (a decoder that reads the grammar, decoding under its mask): the grammar's
    ``SmilesGrammar.stepper``, which the step runs in place of its own ``update``, keeping the
    tokens allowed next as the state's last member (``SmilesGrammar.mask_from_state``);
    without it the state's last member is the grammar's state after the tokens so far
    (``SmilesGrammar.rejection_check`` reads it).
    """
    ban = tf.constant([-1e9 if i in banned_ids else 0.0 for i in range(decoder.vocab_size)])

    grammar = decoder.grammar if decoder.feature_dim else None
    yields_masks = grammar is not None and stepper is not None
    if grammar is not None and stepper is None:
        stepper = (grammar.initial_state(tf.shape(z)[0]),
                   lambda state, tokens: (grammar.update(state, tokens), None), lambda s: s)
    grammar_initial, advance, fields = stepper if grammar is not None else ({}, None, None)

    def step(tokens, state):
        latent_proj, layer_states, grammar_state = state[:3]
        token_proj = decoder.token_projection(tokens)
        allowed = None
        if grammar is not None:  # the decoder reads the grammar's state after ``tokens``
            grammar_state, allowed = advance(grammar_state, tokens)
            token_proj = token_proj + decoder.feature_projection(
                grammar.features(fields(grammar_state), decoder.grammar_max_len))
        logits, layer_states = decoder.step(token_proj, latent_proj, list(layer_states))
        new_state = (latent_proj, layer_states, grammar_state)
        return tf.cast(logits, tf.float32) + ban, new_state + (
            (allowed,) if allowed is not None else ())

    # z's share of the first layer's projection rides in the state (it is computed once, and
    # it shrinks with the batch when finished sequences are dropped).
    state = (decoder.latent_projection(z), decoder.initial_states(z), grammar_initial)
    if yields_masks:  # the allowed tokens, read after the first step
        state += (tf.ones([tf.shape(z)[0], decoder.vocab_size], tf.bool),)
    return step, state


def forced_prefix_step_fn(step_fn: StepFn, state: Any, prefix: tf.Tensor,
                          lengths: tf.Tensor) -> tuple[StepFn, Any]:
    """Wraps a step function so that row ``i`` emits ``prefix[i, :lengths[i]]`` first.

    Until a row has emitted its prefix, its logits allow only the prefix's next token (0 for
    it, -1e9 for the rest), so greedy decoding, sampling and a grammar mask wrapped inside all
    follow it; from then on the row decodes freely, conditioned on what it was made to emit.

    Args:
      step_fn, state: the step function to wrap and its state (batch-major, for compaction).
      prefix: int32 ``(B, P)`` token ids.
      lengths: int32 ``(B,)`` how many of them each row must emit (0: none; at most P).

    Returns:
      ``(step_fn, state)``; the state adds each row's step count, prefix and length (all
      batch-major, so the compacting loop can drop finished rows).
    """
    prefix = tf.convert_to_tensor(prefix, tf.int32)
    lengths = tf.convert_to_tensor(lengths, tf.int32)
    last = tf.maximum(tf.shape(prefix)[1] - 1, 0)

    def step(tokens, wrapped):
        inner, t, rows_prefix, rows_length = wrapped
        logits, inner = step_fn(tokens, inner)
        target = tf.gather(rows_prefix, tf.minimum(t, last), batch_dims=1)
        forced = tf.one_hot(target, tf.shape(logits)[1], on_value=0.0, off_value=-1e9,
                            dtype=logits.dtype)
        logits = tf.where((t < rows_length)[:, None], forced, logits)
        return logits, (inner, t + 1, rows_prefix, rows_length)

    return step, (state, tf.zeros_like(lengths), prefix, lengths)


def sample_from_z(model, z: tf.Tensor, max_len: int | None = None, greedy: bool = False,
                  temperature: float = 1.0, top_k: int = 0,
                  seed: tf.Tensor | None = None, compact: bool = True,
                  grammar=None, beam_width: int = 0, compiled_mask: bool = False,
                  every_hypothesis: bool = False, prefix: tf.Tensor | None = None,
                  prefix_lengths: tf.Tensor | None = None, reject: bool = False):
    """Decodes ``z (B, L)`` with a ``SequenceVAE`` -> int32 ids ``(B, max_len)``.

    ``compact`` drops finished sequences as it goes; pass False inside ``jit_compile``.
    ``grammar``: a ``seqvae.model.grammar.SmilesGrammar`` whose mask the decoding obeys;
    ``compiled_mask`` runs its state machine under XLA (the same masks, faster; see
    ``SmilesGrammar.masked_step_fn``).
    ``beam_width`` > 1: beam search (length-normalised) instead of greedy or sampled decoding;
    ``every_hypothesis``: all of its ``beam_width`` hypotheses, ids ``(B, beam_width, max_len)``.
    ``prefix`` int32 ``(B, P)``, ``prefix_lengths`` int32 ``(B,)``: each row first emits its
    prefix's first ``prefix_lengths`` tokens (``forced_prefix_step_fn``), then decodes freely.
    ``reject`` (with a ``grammar``; not with beam search or a prefix): decodes *without* the
    mask, stopping each row at its first token the grammar forbids -> ``(ids, rejected bool
    (B,))``: a row not rejected is exactly what decoding under the mask with the same seed
    gives, and what a rejection sampler keeps (``inference.rejection_sample``); a rejected
    row's ids end at the forbidden token, and no work is spent on the rest of it.
    """
    max_len = max_len or model.max_len
    batch_size = tf.shape(z)[0]
    start_id = model.bos_id if model.bos_id is not None else PAD_ID
    if reject and (grammar is None or beam_width > 1 or prefix is not None):
        raise SeqvaeError("rejection decoding needs a grammar, and no beam search or prefix")
    if grammar is not None and model.decoder.feature_dim:  # one state machine for both
        if reject:  # the decoder's own state machine; rejection_check reads it
            step, state = decoder_step_fn(model.decoder, z)
        else:
            step, state = decoder_step_fn(model.decoder, z, stepper=grammar.stepper(
                batch_size, max_len, compiled_mask))
            step, state = grammar.mask_from_state(step, state)
    else:
        step, state = decoder_step_fn(model.decoder, z)
        if grammar is not None:
            step, state = grammar.masked_step_fn(step, state, batch_size, max_len,
                                                 compiled=compiled_mask, reject=reject)
    if prefix is not None:
        step, state = forced_prefix_step_fn(step, state, prefix, prefix_lengths)
    if beam_width > 1:
        return beam_search(step, state, batch_size, max_len, beam_width, start_id=start_id,
                           eos_id=EOS_ID, every=every_hypothesis)[0]
    return decode_loop(step, state, batch_size, max_len, start_id=start_id, eos_id=EOS_ID,
                       greedy=greedy, temperature=temperature, top_k=top_k, seed=seed,
                       compact=compact, stop_fn=grammar.rejection_check(
                           batch_size, max_len, compiled_mask) if reject else None)


def prior_z(num: int | tf.Tensor, latent_dim: int, seed) -> tf.Tensor:
    """``num`` draws ``z ~ N(0, I)``, float32 ``(num, latent_dim)``, for a sampling seed.

    The one place prior samples come from: ``inference.sample``, ``sample_prior`` and the exported
    ``sample`` signature all draw z here, and sample batch ``i`` with ``fold_in(seed, i)``.
    """
    return randomness.normal(tf.stack([num, latent_dim]) if isinstance(num, tf.Tensor) else
                             [num, latent_dim], randomness.fold_in(randomness.as_seed(seed), 7))


def aggregate_z(eps, means, scales, seed) -> tf.Tensor:
    """Draws from the aggregate-posterior prior (``seqvae.latent_prior.AggregatePrior``).

    The rows take distinct kernels (a random order of the K, from the seed; row ``j`` takes the
    ``j mod K``-th): each row is still a draw from the mixture, but two rows of one call never
    share a kernel while ``num`` <= K. Drawn independently, 10,000 rows from 50,000 kernels
    share about 1,000 pairs, and a sharp decoder gives a kernel's molecule back for both.

    Args:
      eps: float32 ``(num, latent_dim)`` standard-normal noise (``prior_z`` of the same seed).
      means: float32 ``(K, latent_dim)`` the kernels' centres.
      scales: float32 ``(K, latent_dim)`` their standard deviations.
      seed: the sampling seed (an int or its ``(2,)`` seed); it orders the K kernels.

    Returns:
      float32 ``(num, latent_dim)``: ``means[k_j] + scales[k_j] * eps_j``.
    """
    means = tf.convert_to_tensor(means, tf.float32)
    kernels = tf.shape(means)[0]
    order = tf.argsort(randomness.uniform(kernels[None], randomness.fold_in(
        randomness.as_seed(seed), 11)), stable=True)
    index = tf.gather(order, tf.range(tf.shape(eps)[0]) % kernels)
    return tf.gather(means, index) + tf.gather(tf.convert_to_tensor(scales, tf.float32), index) * eps


def rejection_round_seed(seed, round_: int) -> tf.Tensor:
    """The int32 ``(2,)`` seed of rejection round ``round_`` > 0 for the sampling ``seed`` (an int
    or its ``(2,)`` seed): a hash of both, its second word 0 as ``randomness.as_seed`` of an int
    gives. ``inference.rejection_sample`` and the exported ``sample`` signature draw later rounds
    (and the masked remainder, ``round_`` = R) from it, so both give the same texts."""
    first = randomness.fold_in(randomness.as_seed(seed), 0x4E4A + round_)[0]
    return tf.stack([tf.bitwise.bitwise_and(first, 0x7FFFFFFF), 0])


def rejection_attempts(pending, rejected, drawn) -> tf.Tensor:
    """How many draws a later rejection round makes for ``pending`` rows still to fill, when
    the first round rejected ``rejected`` of its ``drawn`` rows (its share q): the pending rows
    and spares for the ones the grammar will reject again, ``(P q + 3 sqrt(P q + 1)) / (1 - q)``
    rounded up (three standard deviations more than it rejects on average), at most P spares.

    With the spares one round almost always fills every pending row (the accepted draws go to
    the pending rows in order), where drawing only P rows left ~q P for a round of its own, and
    that for another, each a decoding loop of ~45 steps that costs about as much for 3 rows as
    for 100. Draws are independent, so which draw fills which row does not change what a row
    is: still exactly ``p(x | x grammatical)``. int32 scalar; float64 arithmetic, so that
    ``inference.rejection_sample`` and the exported ``sample`` get the same count.
    """
    pending = tf.cast(pending, tf.float64)
    share = tf.cast(rejected, tf.float64) / tf.maximum(tf.cast(drawn, tf.float64), 1.0)
    expected = pending * share
    spares = tf.math.ceil((expected + 3.0 * tf.sqrt(expected + 1.0))
                          / tf.maximum(1.0 - share, 1e-9))
    return tf.cast(pending + tf.minimum(spares, pending), tf.int32)


def sample_prior(model, num: int, seed: int = 0, batch_size: int = 1000, **kwargs) -> tf.Tensor:
    """Draws ``num`` sequences from the prior -> int32 ids ``(num, max_len)``.

    The same ids as ``seqvae.inference.sample(run, num, seed=seed, batch_size=batch_size)``
    decodes to texts; kwargs as ``sample_from_z``.
    """
    z = prior_z(num, model.config.latent_dim, seed)
    base = randomness.as_seed(seed)
    batches = [sample_from_z(model, z[start:start + batch_size], seed=randomness.fold_in(base, i),
                             **kwargs) for i, start in enumerate(range(0, num, batch_size))]
    return tf.concat(batches, axis=0)
