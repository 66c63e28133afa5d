"""The sequence VAE: the encoder model, a reparametrized z, and the stacked-GRU decoder model.

Shapes: ``B`` batch, ``T`` time steps, ``V`` vocabulary size, ``L`` latent size, ``H`` GRU units.
"""

from __future__ import annotations

import contextlib

import keras
import tensorflow as tf

from seqvae.config import ModelConfig
from seqvae.data.vocabulary import BOS_ID, PAD_ID
from seqvae.errors import SeqvaeError
from seqvae.model import randomness
from seqvae.model.decoder import Decoder
from seqvae.model.encoder import Encoder
from seqvae.model.layers import BuiltOnFirstCall
from seqvae.model.property_head import PropertyHead


@contextlib.contextmanager
def precision_policy(precision: str = "float32"):
    """Layers built inside compute in ``precision`` (``float32``, ``mixed_bfloat16``,
    ``mixed_float16``); variables stay float32 either way. Restores the previous global policy."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


class SequenceVAE(BuiltOnFirstCall, keras.Model):
    """Encoder model + reparametrization + decoder model.

    ``call(ids)`` with ids ``(B, T)`` (tokens, ``<eos>``, then ``<pad>``) returns a dict with
    ``logits (B, T, V)`` predicting ``ids``, ``z_mean``, ``z_log_var`` and ``z`` ``(B, L)``, and
    with ``num_properties`` > 0 ``properties (B, P)``, the property head's prediction from ``z``.
    The noise of the reparametrization and of dropout comes from a stateless ``seed`` ``(2,)``,
    so the same seed gives the same loss eagerly, in ``tf.function`` and under XLA.
    ``grammar``: the run's ``SmilesGrammar``, required with ``config.grammar_features`` (the
    decoder then reads its state: ``teacher_forced_features`` here, ``decoding.decoder_step_fn``
    when decoding).
    """

    def __init__(self, config: ModelConfig, vocab_size: int, max_len: int, bos_id: int | None = BOS_ID,
                 num_properties: int = 0, grammar=None, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.vocab_size = vocab_size
        self.max_len = max_len
        self.bos_id = bos_id
        self.num_properties = num_properties
        self.encoder = Encoder(config, vocab_size, max_len, name="encoder")
        self.decoder = Decoder(config, vocab_size, start_id=bos_id, name="decoder")
        if config.grammar_features:  # the decoder reads the grammar's state
            if grammar is None:
                raise SeqvaeError("model.grammar_features needs a SMILES run (its grammar)")
            self.decoder.grammar, self.decoder.grammar_max_len = grammar, max_len
        self.property_head = None
        if num_properties:  # trained jointly (data.properties): z -> standardised properties
            self.property_head = PropertyHead(num_properties, config.property_head_depth,
                                              config.property_head_width, name="property_head")

    def build_weights(self) -> "SequenceVAE":
        """Creates every variable by running a dummy batch (needed before restoring weights).

        Two steps are enough: no weight depends on the sequence length (``conv`` and ``dense``
        encoders pad to ``max_len``), and an eager loop over ``max_len`` steps costs seconds.
        """
        ids = tf.zeros([1, min(2, self.max_len)], tf.int32)
        self(ids, training=False, seed=tf.constant([0, 0]))
        return self

    @staticmethod
    def reparametrize(z_mean, z_log_var, seed):
        """``z = mean + exp(log_var / 2) * eps``, ``eps ~ N(0, I)`` drawn from the stateless seed."""
        eps = randomness.normal(tf.shape(z_mean), seed, dtype=z_mean.dtype)
        return randomness.reparametrize(z_mean, z_log_var, eps)

    def decoder_inputs(self, ids: tf.Tensor) -> tf.Tensor:
        """Teacher-forcing inputs: ``<bos>`` followed by ``ids`` shifted right by one."""
        start = tf.fill([tf.shape(ids)[0], 1], tf.cast(self.bos_id or PAD_ID, ids.dtype))
        return tf.concat([start, ids[:, :-1]], axis=1)

    def decoder_features(self, ids: tf.Tensor) -> tf.Tensor | None:
        """What a ``grammar_features`` decoder reads under teacher forcing: the grammar's state
        before each target of ``ids (B, T)``, float32 ``(B, T, FEATURE_DIM)``; None for a
        decoder that reads no grammar."""
        if not self.decoder.feature_dim:
            return None
        return self.decoder.grammar.teacher_forced_features(ids, self.max_len)

    def call(self, ids, training=None, seed=None, sample_z=True, decoder_inputs=None,
             z_noise=None):
        """``z_noise`` ``(B, L)``: use these standard-normal draws for the reparametrization."""
        if seed is None:
            seed = tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int32)
        z_mean, z_log_var = self.encoder(ids, training=training)
        if not sample_z:
            z = z_mean
        elif z_noise is not None:
            z = randomness.reparametrize(z_mean, z_log_var, tf.cast(z_noise, z_mean.dtype))
        else:
            z = self.reparametrize(z_mean, z_log_var, randomness.fold_in(seed, 0))
        if decoder_inputs is None:
            decoder_inputs = self.decoder_inputs(ids)
        logits = self.decoder(z, decoder_inputs, training=training,
                              seed=randomness.fold_in(seed, 1),
                              features=self.decoder_features(ids))
        out = {"logits": logits, "z_mean": z_mean, "z_log_var": z_log_var, "z": z}
        if self.property_head is not None:
            out["properties"] = self.property_head(z, training=training)  # (B, P)
        return out

    def get_config(self):
        return {"config": vars(self.config), "vocab_size": self.vocab_size,
                "max_len": self.max_len, "bos_id": self.bos_id,
                "num_properties": self.num_properties}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(ModelConfig(**config.pop("config")), **config)
