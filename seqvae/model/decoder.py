"""The decoder model: a stacked GRU conditioned on z, run over a whole sequence (training,
likelihoods) or one step at a time (``seqvae.model.decoding``).

Every recurrent loop here is a ``tf.while_loop`` over ``tf.TensorArray`` s: the per-step outputs
are written to a TensorArray (a value the tape differentiates through), never ``assign``-ed into a
``tf.Variable`` (a stateful write that the tape does not record, which is why the classic custom
loop gets ``None`` gradients for every decoder weight). The same code runs eagerly, inside
``tf.function`` and under XLA.

Shapes: ``B`` batch, ``T`` time steps, ``V`` vocabulary size, ``L`` latent size, ``H`` GRU units.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from seqvae.config import ModelConfig
from seqvae.data.vocabulary import BOS_ID
from seqvae.model import randomness
from seqvae.model.gru import GRU, matmul_last_axis
from seqvae.model.layers import BuiltOnFirstCall, as_features, set_layers, stateless_dropout


class Decoder(BuiltOnFirstCall, keras.Model):
    """Stacked GRU decoder: ``z (B, L)`` (+ decoder inputs) -> logits ``(B, T, V)``.

    Input modes (``config.decoder_input``):
      - ``teacher_forcing``: step t reads the true token t-1 (``<bos>`` first); one loop steps
        every layer (no per-layer ``(T, B, 3H)`` projections).
      - ``free_running``: step t reads ``softmax(logits[t-1])`` mapped through the token
        embedding (differentiable), ``<bos>`` first: the classic example's loop, as a
        ``tf.while_loop`` over all layers writing a ``tf.TensorArray``.
      - ``latent_only``: z is the only input at every step (chemical VAE, classic dummy decoder).
    ``config.grammar_features``: the SMILES grammar's state after the input token
    (``SmilesGrammar.features``: open rings and branches, pending bond, valence left, previous
    token class) joins the first layer's input at every step (``decoding.decoder_step_fn`` runs
    the state machine as it decodes; training reads ``teacher_forced_features``).
    z conditioning (``config.z_conditioning``): ``init`` sets every layer's initial state to a
    linear map of z (MOSES), ``concat`` appends z to the input of the first layer at every step
    (its projection is computed once), ``both`` does both, ``none`` neither: the decoder is a
    language model that z does not reach (the control a VAE is measured against).
    """

    def __init__(self, config: ModelConfig, vocab_size: int, start_id: int | None = BOS_ID, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.vocab_size = vocab_size
        self.start_id = start_id
        self.embedding = (keras.layers.Embedding(vocab_size, config.embedding_dim, name="embedding")
                          if config.embedding_dim and config.decoder_input != "latent_only" else None)
        self.token_dim = 0 if config.decoder_input == "latent_only" else (
            config.embedding_dim or vocab_size)
        self.uses_init = config.z_conditioning in ("init", "both")
        self.uses_concat = config.z_conditioning in ("concat", "both") or (
            config.decoder_input == "latent_only")
        from seqvae.model.smiles_tokens import FEATURE_DIM

        self.feature_dim = FEATURE_DIM if config.grammar_features else 0
        self.grammar = None  # set by whoever builds a grammar_features model (its SMILES grammar)
        self.grammar_max_len = 0
        first_dim = (self.token_dim + (config.latent_dim if self.uses_concat else 0)
                     + self.feature_dim)
        set_layers(self, "gru", [GRU(config.decoder_units,
                                      first_dim if i == 0 else config.decoder_units,
                                      name=f"gru_{i}") for i in range(config.decoder_layers)])
        if self.uses_init:
            layers = config.decoder_layers if config.init_per_layer else 1
            self.dense_init = keras.layers.Dense(config.decoder_units * layers, name="z_to_state")
        self.dense_logits = keras.layers.Dense(vocab_size, name="logits")

    # -- pieces shared by the full-sequence pass, the free-running loop and the samplers --------

    def initial_states(self, z: tf.Tensor) -> list[tf.Tensor]:
        """One ``(B, H)`` state per layer: a linear map of z (init) or zeros."""
        if self.uses_init and not self.config.init_per_layer:  # MOSES: one state for every layer
            return [self.dense_init(z)] * self.config.decoder_layers
        if self.uses_init:
            return tf.split(self.dense_init(z), self.config.decoder_layers, axis=-1)
        zeros = tf.zeros([tf.shape(z)[0], self.config.decoder_units], z.dtype)
        return [zeros] * self.config.decoder_layers

    def latent_projection(self, z: tf.Tensor) -> tf.Tensor:
        """z's constant share of the first layer's input projection ``(B, 3H)`` (bias included)."""
        gru = self.grus[0]
        if not self.uses_concat:
            return tf.broadcast_to(gru.bias[0], [tf.shape(z)[0], 3 * gru.units])
        return gru.project(z, kernel_rows=(self.token_dim, self.token_dim + self.config.latent_dim))

    def token_projection(self, tokens: tf.Tensor) -> tf.Tensor:
        """Token ids ``(...)`` or distributions ``(..., V)`` -> first-layer projection ``(..., 3H)``.

        Excludes the bias (``latent_projection`` carries it). With one-hot tokens, ids select
        kernel rows and distributions multiply the kernel rows directly.
        """
        gru = self.grus[0]
        if self.token_dim == 0:
            return None
        features = as_features(tokens, self.vocab_size, self.embedding)
        kernel = gru.kernel[:self.token_dim]
        if features.dtype.is_integer:
            return tf.gather(kernel, features)
        return matmul_last_axis(tf.cast(features, kernel.dtype), kernel)

    def feature_projection(self, features: tf.Tensor) -> tf.Tensor:
        """Grammar features ``(..., F)`` -> their share of the first layer's projection
        ``(..., 3H)`` (the last F kernel rows)."""
        kernel = self.grus[0].kernel
        rows = kernel[kernel.shape[0] - self.feature_dim:]
        return matmul_last_axis(tf.cast(features, rows.dtype), rows)

    def start_tokens(self, batch_size: tf.Tensor) -> tf.Tensor:
        """First decoder inputs ``(B, V)``: one-hot ``<bos>``, or zeros when there is none."""
        if self.start_id is None:
            return tf.zeros([batch_size, self.vocab_size])
        return tf.one_hot(tf.fill([batch_size], self.start_id), self.vocab_size)

    def step(self, token_proj, latent_proj, states, training=False, seed=None):
        """Advances every layer one step.

        Args:
          token_proj: ``(B, 3H)`` first-layer projection of the input token (None: latent_only).
          latent_proj: ``(B, 3H)`` from ``latent_projection``.
          states: list of ``(B, H)``, one per layer.

        Returns:
          logits ``(B, V)`` and the new list of states.
        """
        new_states = self._advance_layers(token_proj, latent_proj, states, training, seed)
        return self.dense_logits(new_states[-1]), new_states

    def _advance_layers(self, token_proj, latent_proj, states, training, seed):
        """Every layer one step (arguments as in ``step``): the new list of states ``(B, H)``."""
        x_proj = latent_proj if token_proj is None else latent_proj + token_proj
        new_states = []
        for i, gru in enumerate(self.grus):
            if i > 0:
                x = stateless_dropout(new_states[-1], self.config.decoder_dropout,
                                      None if seed is None else randomness.fold_in(seed, i), training)
                x_proj = gru.project(x)
            new_states.append(gru.step(x_proj, states[i]))
        return new_states

    # -- full passes ---------------------------------------------------------------------------

    def call(self, z, decoder_inputs=None, num_steps=None, training=None, seed=None,
             features=None):
        """Decodes a whole sequence.

        Args:
          z: float ``(B, L)``.
          decoder_inputs: int ``(B, T)`` inputs for teacher forcing (``<bos>``, x_0 .. x_{T-2});
            for the other modes only its length T is used.
          num_steps: T when ``decoder_inputs`` is None.
          seed: int ``(2,)`` stateless seed for dropout.
          features: float ``(B, T, F)``, the grammar's state before each step
            (``SmilesGrammar.teacher_forced_features``), for a ``grammar_features`` decoder.

        Returns:
          logits ``(B, T, V)``.
        """
        if num_steps is None:
            num_steps = tf.shape(decoder_inputs)[1]
        states = self.initial_states(z)
        latent_proj = self.latent_projection(z)
        if self.config.decoder_input == "free_running":
            return self._free_running(latent_proj, states, num_steps, training, seed)
        tokens = decoder_inputs if self.config.decoder_input == "teacher_forcing" else None
        return self._known_inputs(latent_proj, states, tokens, num_steps, training, seed,
                                  features)

    def _known_inputs(self, latent_proj, states, tokens, num_steps, training, seed,
                      features=None):
        """Teacher forcing (``tokens (B, T)``) or latent_only (None): one loop advances all layers.

        Every layer steps inside the same loop and projects its input there, as the sampler does.
        At MOSES size this is 12% faster and needs 700 MiB less than running the layers one after
        another with each layer's ``(T, B, 3H)`` input projection computed at once: those tensors,
        and their gradients, never exist.
        """
        top_ta = tf.TensorArray(latent_proj.dtype, size=num_steps)  # last layer's states
        tokens_ta = None
        if tokens is not None:
            tokens_ta = tf.TensorArray(tokens.dtype, size=num_steps).unstack(tf.transpose(tokens))
        features_ta = None
        if self.feature_dim:
            features_ta = tf.TensorArray(features.dtype, size=num_steps).unstack(
                tf.transpose(features, [1, 0, 2]))

        def body(t, states, top_ta):
            step_seed = None if seed is None else randomness.fold_in(seed, t)
            token_proj = None if tokens_ta is None else self.token_projection(tokens_ta.read(t))
            if features_ta is not None:
                token_proj = token_proj + self.feature_projection(features_ta.read(t))
            states = self._advance_layers(token_proj, latent_proj, states, training, step_seed)
            return t + 1, states, top_ta.write(t, states[-1])

        _, _, top_ta = tf.while_loop(
            lambda t, *_: t < num_steps, body, (tf.constant(0), states, top_ta),
            maximum_iterations=num_steps)
        return tf.transpose(self.sequence_logits(top_ta.stack()), [1, 0, 2])  # (B, T, V)

    def sequence_logits(self, sequence: tf.Tensor) -> tf.Tensor:
        """``(..., H) -> (..., V)`` through the output layer as one 2-D matmul."""
        flat = self.dense_logits(tf.reshape(sequence, [-1, sequence.shape[-1]]))
        return tf.reshape(flat, tf.concat([tf.shape(sequence)[:-1], [self.vocab_size]], 0))

    def _free_running(self, latent_proj, states, num_steps, training, seed):
        batch_size = tf.shape(latent_proj)[0]
        logits_ta = tf.TensorArray(latent_proj.dtype, size=num_steps)
        previous = tf.cast(self.start_tokens(batch_size), latent_proj.dtype)

        def body(t, previous, states, logits_ta):
            step_seed = None if seed is None else randomness.fold_in(seed, t)
            logits, states = self.step(self.token_projection(previous), latent_proj, states,
                                       training, step_seed)
            return t + 1, tf.nn.softmax(logits), states, logits_ta.write(t, logits)

        _, _, _, logits_ta = tf.while_loop(
            lambda t, *_: t < num_steps, body, (tf.constant(0), previous, states, logits_ta),
            maximum_iterations=num_steps)
        return tf.transpose(logits_ta.stack(), [1, 0, 2])

    def get_config(self):
        return {"config": vars(self.config), "vocab_size": self.vocab_size, "start_id": self.start_id}
