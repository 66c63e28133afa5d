"""The encoder model: a sequence -> the parameters of ``q(z | x)``.

Shapes: ``B`` batch, ``T`` time steps, ``V`` vocabulary size, ``L`` latent size.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from seqvae.config import ModelConfig
from seqvae.model.gru import GRU
from seqvae.model.layers import BuiltOnFirstCall, as_features, sequence_mask, set_layers


class Encoder(BuiltOnFirstCall, keras.Model):
    """Maps a sequence to the parameters of ``q(z | x)``: ``(z_mean, z_log_var)``, each ``(B, L)``.

    Inputs are int ids ``(B, T)`` (``<pad>`` = 0 marks the end) or one-hot floats ``(B, T, V)``
    (all-zero rows mark the end). ``gru``: stacked (optionally bidirectional) GRU, last real state.
    ``conv``: Conv1D stack, flatten, dense (chemical VAE). ``dense``: flattened one-hot, dense
    (the classic example). ``conv`` and ``dense`` pad inputs to ``max_len``.
    """

    def __init__(self, config: ModelConfig, vocab_size: int, max_len: int, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.vocab_size = vocab_size
        self.max_len = max_len
        self.embedding = (keras.layers.Embedding(vocab_size, config.embedding_dim, name="embedding")
                          if config.embedding_dim else None)
        feature_dim = config.embedding_dim or vocab_size
        if config.encoder == "gru":
            directions = 2 if config.encoder_bidirectional else 1
            grus = [GRU(config.encoder_units,
                        feature_dim if layer == 0 else config.encoder_units * directions,
                        name=f"gru_{layer}_{d}")
                    for layer in range(config.encoder_layers)
                    for d in ("forward", "backward")[:directions]]
            set_layers(self, "gru", grus)
            self.directions = directions
        elif config.encoder == "conv":
            set_layers(self, "conv", [
                keras.layers.Conv1D(config.conv_filters, config.conv_kernel_size, padding="same",
                                    activation="relu", name=f"conv_{i}")
                for i in range(config.encoder_layers)])
        if config.encoder in ("conv", "dense"):
            self.hidden = keras.layers.Dense(config.encoder_units, activation="relu", name="hidden")
        self.dense_mean = keras.layers.Dense(config.latent_dim, name="z_mean")
        self.dense_log_var = keras.layers.Dense(config.latent_dim, name="z_log_var")

    def call(self, inputs, training=None):
        mask = sequence_mask(inputs)
        if self.config.encoder == "gru":
            summary = self._gru_summary(inputs, mask)
        else:
            features = inputs if not inputs.dtype.is_integer or self.embedding else tf.one_hot(
                inputs, self.vocab_size)
            features = as_features(features, self.vocab_size, self.embedding)
            features = features * tf.cast(mask, features.dtype)[..., None]
            pad = self.max_len - tf.shape(features)[1]
            features = tf.pad(features, [[0, 0], [0, pad], [0, 0]])
            features = tf.ensure_shape(features, [None, self.max_len, features.shape[-1]])
            if self.config.encoder == "conv":
                for conv in self.convs:
                    features = conv(features)
            summary = self.hidden(keras.ops.reshape(features, (tf.shape(features)[0], -1)))
        return self.dense_mean(summary), self.dense_log_var(summary)

    def _gru_summary(self, inputs, mask):
        lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
        # time-major throughout: (T, B, ...) ids or features, no transposes between layers
        steps_first = [1, 0] + list(range(2, inputs.shape.rank))
        sequence = as_features(tf.transpose(inputs, steps_first), self.vocab_size, self.embedding)
        mask = tf.transpose(mask)
        finals = []
        for first in range(0, len(self.grus), self.directions):
            outputs, finals = [], []
            for direction, gru in enumerate(self.grus[first:first + self.directions]):
                x = sequence
                if direction == 1:  # reverse only the real part, padding stays at the end
                    x = tf.reverse_sequence(x, lengths, seq_axis=0, batch_axis=1)
                out, last = gru(x, step_mask=mask, time_major=True)
                if direction == 1:
                    out = tf.reverse_sequence(out, lengths, seq_axis=0, batch_axis=1)
                outputs.append(out)
                finals.append(last)
            sequence = tf.concat(outputs, axis=-1)
        return tf.concat(finals, axis=-1)

    def get_config(self):
        return {"config": vars(self.config), "vocab_size": self.vocab_size, "max_len": self.max_len}
