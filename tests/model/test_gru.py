"""The GRU layer: equal to Keras's reset_after GRU; time-major and masked scans."""

import numpy as np
import tensorflow as tf

from seqvae.model.gru import GRU, matmul_last_axis


def test_gru_matches_keras_gru():
    """Our GRU is the Keras reset_after GRU (here projecting each step inside its loop)."""
    import keras

    x = tf.random.stateless_normal([3, 5, 4], seed=[1, 2])
    ours = GRU(6, 4)
    reference = keras.layers.GRU(6, return_sequences=True, return_state=True)
    reference(x)
    reference.set_weights([ours.kernel.numpy(), ours.recurrent_kernel.numpy(),
                           np.random.default_rng(0).normal(size=(2, 18)).astype(np.float32)])
    ours.bias.assign(reference.get_weights()[2])
    out, last = ours(x)
    ref_out, ref_last = reference(x)
    np.testing.assert_allclose(out.numpy(), ref_out.numpy(), atol=1e-5)
    np.testing.assert_allclose(last.numpy(), ref_last.numpy(), atol=1e-5)


def test_time_major_scan_and_masked_steps():
    gru = GRU(5, 3)
    x = tf.random.stateless_normal([2, 4, 3], seed=[3, 4])
    state = tf.random.stateless_normal([2, 5], seed=[5, 6])
    mask = tf.constant([[True, True, True, True], [True, True, False, False]])
    out, last = gru.scan(x, state, mask)
    out_tm, last_tm = gru.scan(tf.transpose(x, [1, 0, 2]), state, tf.transpose(mask), time_major=True)
    np.testing.assert_allclose(tf.transpose(out_tm, [1, 0, 2]), out, atol=1e-6)
    np.testing.assert_allclose(last_tm, last, atol=1e-6)
    np.testing.assert_array_equal(out[1, 2], out[1, 1])  # a masked step carries the state
    np.testing.assert_array_equal(last[1], out[1, 1])
    np.testing.assert_allclose(out[0, 0], gru.step(gru.project(x[:, 0]), state)[0], atol=1e-6)


def test_integer_ids_project_as_one_hot_rows():
    gru = GRU(4, 6)
    ids = tf.constant([[1, 5, 0]])
    np.testing.assert_allclose(gru.project(ids), gru.project(tf.one_hot(ids, 6)), atol=1e-6)
    x = tf.random.stateless_normal([2, 3, 6], seed=[1, 1])
    np.testing.assert_allclose(matmul_last_axis(x, gru.kernel), tf.matmul(x, gru.kernel), atol=1e-5)
