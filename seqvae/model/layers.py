"""Small pieces the encoder and the decoder share: token features, padding masks, seeded
dropout, attaching lists of layers so that checkpoints see them, and building models on their first
call."""

from __future__ import annotations

import keras
import tensorflow as tf

from seqvae.data.vocabulary import PAD_ID
from seqvae.model import randomness
from seqvae.model.gru import matmul_last_axis


class BuiltOnFirstCall:
    """Mixin for seqvae's ``keras.Model`` subclasses: the model counts as built when first called,
    and its layers create their variables as that call reaches them.

    Keras builds a model that has no ``build`` of its own by first tracing ``call`` on symbolic
    inputs (``compute_output_spec``), then running it: for the VAE a second trace of the whole
    decoder loop, nested once per sub-model, about a second of every ``load_run`` and ``train``.
    """

    def build(self, input_shape=None):
        self.built = True


def stateless_dropout(x: tf.Tensor, rate: float, seed: tf.Tensor | None, training: bool) -> tf.Tensor:
    """Dropout whose mask is a pure function of ``seed`` (so eager, graph and resumed runs agree)."""
    if not training or rate <= 0 or seed is None:
        return x
    return randomness.dropout(x, rate, seed)


def set_layers(owner: keras.Model, prefix: str, layers: list) -> None:
    """Attaches layers as attributes ``prefix_0, prefix_1, ...`` plus a plain tuple ``prefixs``.

    Keras 3 does not expose layers held in a Python list as checkpoint children, so a
    ``tf.train.Checkpoint`` of the model would silently skip their weights; one attribute per
    layer makes each a named child (``decoder/gru_0/kernel``).
    """
    for i, layer in enumerate(layers):
        setattr(owner, f"{prefix}_{i}", layer)
    object.__setattr__(owner, f"{prefix}s", tuple(layers))  # bypasses Keras tracking: no duplicates


def as_features(inputs: tf.Tensor, vocab_size: int, embedding: keras.layers.Layer | None):
    """Token ids -> embeddings (or the ids themselves for one-hot); float inputs pass through.

    Float inputs are one-hot or soft distributions ``(B, T, V)``; with a learned embedding they are
    mapped through the embedding matrix (``probs @ E``), which keeps soft inputs differentiable.
    """
    if embedding is None:
        return inputs
    if inputs.dtype.is_integer:
        return embedding(inputs)
    return matmul_last_axis(inputs, tf.cast(embedding.embeddings, inputs.dtype))


def sequence_mask(inputs: tf.Tensor, pad_id: int = PAD_ID) -> tf.Tensor:
    """bool ``(B, T)``: True at the real tokens, those before the first ``<pad>`` (id ``pad_id``,
    or an all-zero one-hot row); whatever follows the first pad is not part of the sequence."""
    if inputs.dtype.is_integer:
        real = tf.not_equal(inputs, pad_id)
    else:
        real = tf.reduce_sum(inputs, axis=-1) > 0
    return tf.cast(tf.math.cumprod(tf.cast(real, tf.int32), axis=1), tf.bool)
