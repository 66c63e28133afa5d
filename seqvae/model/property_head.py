"""The property head: an MLP from z to standardised molecular properties (chemical VAE).

Gómez-Bombarelli et al. (2018) train a property predictor on z jointly with the VAE, so that
z is organised by the properties and gradients of the prediction point towards better
molecules. The head is trained with ``property_loss`` (MSE on standardised targets) either
jointly (``train.property_weight``) or afterwards on a trained run's encodings
(``seqvae.property_fit``).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from seqvae.model.layers import BuiltOnFirstCall, set_layers


ACTIVATIONS = ("tanh", "silu", "gelu", "relu")


class PropertyHead(BuiltOnFirstCall, keras.Model):
    """``z (B, L) -> standardised properties (B, P)``: ``depth`` layers of ``width`` units and a
    linear output layer (the chemical VAE's predictor: depth 3, width 67, tanh; a head fitted
    afterwards uses SiLU, ``seqvae.property_fit``)."""

    def __init__(self, num_properties: int, depth: int = 3, width: int = 67,
                 activation: str = "tanh", **kwargs):
        super().__init__(**kwargs)
        self.num_properties, self.depth, self.width = num_properties, depth, width
        self.activation = activation
        set_layers(self, "hidden", [keras.layers.Dense(width, activation=activation,
                                                       name=f"hidden_{i}")
                                    for i in range(depth)])
        self.out = keras.layers.Dense(num_properties, name="out")

    def call(self, z, training=None):
        x = z
        for layer in self.hiddens:
            x = layer(x)
        return self.out(x)

    def build_weights(self, latent_dim: int) -> "PropertyHead":
        """Creates the variables for ``latent_dim`` inputs (before loading saved weights)."""
        self(tf.zeros([1, latent_dim]))
        return self

    def get_config(self):
        return {"num_properties": self.num_properties, "depth": self.depth, "width": self.width,
                "activation": self.activation}


def property_loss(targets: tf.Tensor, predictions: tf.Tensor) -> tf.Tensor:
    """Mean squared error over the known targets.

    ``sum over (b, p) with targets[b, p] not NaN of (predictions - targets)^2`` divided by the
    number of such entries; unknown (NaN) targets contribute nothing, gradient included.

    Args:
      targets: float ``(B, P)`` standardised properties, NaN where unknown.
      predictions: float ``(B, P)``.

    Returns:
      Scalar float32.
    """
    targets = tf.cast(targets, tf.float32)
    predictions = tf.cast(predictions, tf.float32)
    known = tf.logical_not(tf.math.is_nan(targets))
    error = tf.where(known, predictions - tf.where(known, targets, 0.0), 0.0)
    return tf.reduce_sum(tf.square(error)) / tf.maximum(tf.reduce_sum(tf.cast(known, tf.float32)), 1.0)
