"""The gradient doctor finds the classic bug and passes seqvae's own models."""

import numpy as np
import tensorflow as tf
from conftest import tiny_config

from seqvae import diagnostics


def test_classify_gradient():
    assert diagnostics.classify_gradient(None) == "None"
    assert diagnostics.classify_gradient(tf.zeros([2])) == "zero"
    assert diagnostics.classify_gradient(tf.constant([1.0, np.nan])) == "non-finite"
    assert diagnostics.classify_gradient(tf.constant([0.0, 1.0])) == "ok"


def test_the_classic_assign_loop_loses_decoder_gradients():
    """The bug seqvae exists to avoid: step outputs assigned into a tf.Variable."""
    dense = tf.keras.layers.Dense(4)
    z = tf.ones([3, 5])
    dense(z)
    with tf.GradientTape() as tape:
        buffer = tf.Variable(tf.zeros([3, 3, 4]))
        for t in range(3):
            buffer[:, t, :].assign(tf.nn.softmax(dense(z)))
        loss = tf.reduce_sum(buffer)
    gradients = tape.gradient(loss, dense.trainable_weights)
    assert [diagnostics.classify_gradient(g) for g in gradients] == ["None", "None"]


def test_doctor_reports_every_mode_ok_and_formats_a_table():
    reports = diagnostics.doctor(tiny_config(), vocab_size=10, max_len=8,
                                 executions=("eager", "tf.function"))
    assert len(reports) == 3 * 3 * 2
    assert all(r.ok for r in reports)
    table = diagnostics.format_reports(reports)
    assert "18 of 18 checks passed" in table


def test_doctor_flags_a_variable_without_gradient():
    report = diagnostics.GradientReport("teacher_forcing", "both", "eager", "float32", 1.0, 3,
                                        {"decoder/unused": "None"})
    assert not report.ok
    assert "decoder/unused: None" in diagnostics.format_reports([report])


def test_doctor_mixed_precision_gradients_reach_every_weight():
    reports = diagnostics.doctor(tiny_config(), vocab_size=10, max_len=8, all_modes=False,
                                 precisions=("mixed_bfloat16", "mixed_float16"))
    assert {r.precision for r in reports} == {"mixed_bfloat16", "mixed_float16"}
    assert all(r.ok for r in reports), diagnostics.format_reports(reports)
