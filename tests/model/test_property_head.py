"""The property head's shape and its masked MSE."""

import numpy as np
import pytest
import tensorflow as tf

from seqvae.model.property_head import PropertyHead, property_loss


def test_head_shapes_and_layers():
    head = PropertyHead(3, depth=3, width=67).build_weights(8)
    assert head(tf.zeros([5, 8])).shape == (5, 3)
    assert [v.shape for v in head.trainable_variables][::2] == [(8, 67), (67, 67), (67, 67), (67, 3)]


def test_property_loss_skips_unknown_targets():
    targets = tf.constant([[1.0, np.nan], [0.0, 2.0]])
    predictions = tf.constant([[2.0, 100.0], [0.0, 0.0]])
    # known entries: (2-1)^2, (0-0)^2, (0-2)^2 -> 5 / 3
    assert float(property_loss(targets, predictions)) == pytest.approx(5 / 3)
    with tf.GradientTape() as tape:
        tape.watch(predictions)
        loss = property_loss(targets, predictions)
    gradient = tape.gradient(loss, predictions).numpy()
    assert np.all(np.isfinite(gradient)) and gradient[0, 1] == 0.0
