"""The gradient doctor finds the classic bug and passes seqvae's own models."""

import numpy as np
import pytest
import tensorflow as tf
from conftest import tiny_config

from seqvae.model import likelihood
from seqvae.config import DECODER_INPUTS, Z_CONDITIONINGS
from seqvae.training import doctor, objective


def test_classify_gradient():
    assert doctor.classify_gradient(None) == "None"
    assert doctor.classify_gradient(tf.zeros([2])) == "zero"
    assert doctor.classify_gradient(tf.constant([1.0, np.nan])) == "non-finite"
    assert doctor.classify_gradient(tf.constant([0.0, 1.0])) == "ok"


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
    assert [doctor.classify_gradient(g) for g in gradients] == ["None", "None"]


@pytest.mark.slow
def test_doctor_reports_every_mode_ok_and_formats_a_table():
    # Every mode eagerly (tests/model/test_vae.py checks each in tf.function and XLA too).
    reports = doctor.doctor(tiny_config(), max_len=8, executions=("eager",))
    assert len(reports) == 3 * 3
    assert [(r.decoder_input, r.z_conditioning) for r in reports] == [
        (d, z) for d in DECODER_INPUTS for z in Z_CONDITIONINGS]
    assert all(r.ok for r in reports)
    table = doctor.format_reports(reports)
    assert "9 of 9 checks passed" in table


def _custom_loop_loss(models, assign_into_variable):
    """A stand-in for ``compute_losses`` written as the classic custom loop: the decoder runs
    step by step (free running, each step's softmax fed back) and the step outputs are either
    assigned into a ``tf.Variable`` buffer that the loss then reads (the bug) or stacked (fine).
    ``models`` collects the model ``check_gradients`` builds."""
    buffers = {}

    def loss_fn(model, ids, step, config, total_steps, **_):
        models.append(model)
        batch, steps = ids.shape
        decoder = model.decoder
        z_mean, z_log_var = model.encoder(ids, training=True)
        states = decoder.initial_states(z_mean)
        latent_proj = decoder.latent_projection(z_mean)
        previous = decoder.start_tokens(batch)
        outputs = []
        if assign_into_variable and "buffer" not in buffers:  # created once, outside tf.function
            buffers["buffer"] = tf.Variable(tf.zeros([batch, steps, model.vocab_size]),
                                            trainable=False)
        for t in range(steps):
            logits, states = decoder.step(decoder.token_projection(previous), latent_proj, states)
            previous = tf.nn.softmax(logits)
            if assign_into_variable:
                buffers["buffer"][:, t, :].assign(previous)
            else:
                outputs.append(previous)
        probabilities = (tf.convert_to_tensor(buffers["buffer"]) if assign_into_variable
                         else tf.stack(outputs, axis=1))
        recon = likelihood.probability_cross_entropy(tf.one_hot(ids, model.vocab_size),
                                                    probabilities)
        return {"loss": recon + 0.1 * likelihood.kl_divergence(z_mean, z_log_var)}

    return loss_fn


def _check_custom_loop(monkeypatch, assign_into_variable):
    models = []
    # check_gradients looks compute_losses up in seqvae.training.objective when it runs.
    monkeypatch.setattr(objective, "compute_losses",
                        _custom_loop_loss(models, assign_into_variable))
    if hasattr(doctor, "compute_losses"):  # should the import move to module level
        monkeypatch.setattr(doctor, "compute_losses", objective.compute_losses)
    config = tiny_config(decoder_input="free_running", decoder_layers=1)
    reports = doctor.check_gradients(config, doctor.example_batch(10, 6), vocab_size=10)
    assert models, "check_gradients did not use the patched loss"
    return reports, models[0]


def test_check_gradients_catches_decoder_outputs_assigned_into_a_variable(monkeypatch):
    """The original bug for real: check_gradients reports every decoder weight as None."""
    reports, model = _check_custom_loop(monkeypatch, assign_into_variable=True)
    decoder_paths = {v.path for v in model.decoder.trainable_variables}
    encoder_paths = {v.path for v in model.encoder.trainable_variables}
    assert decoder_paths and encoder_paths
    assert [r.execution for r in reports] == ["eager", "tf.function", "xla"]
    for report in reports:
        assert not report.ok, report
        assert report.problems == {path: "None" for path in decoder_paths}, report
        assert report.variables == len(model.trainable_variables)
    table = doctor.format_reports(reports)
    assert "0 of 3 checks passed" in table and "variables marked None get no gradient" in table
    for path in decoder_paths:
        assert f"    {path}: None" in table


def test_check_gradients_passes_the_same_loop_without_the_assign(monkeypatch):
    """Control: the same hand-written loop with the step outputs stacked has every gradient."""
    reports, _ = _check_custom_loop(monkeypatch, assign_into_variable=False)
    for report in reports:
        assert report.ok, report


def test_check_model_gradients_on_an_arbitrary_model_and_loss():
    """The doctor checks any model and loss: here every weight's output path is cut by an
    ``assign``, as in the classic custom loop, and every weight is reported."""
    model = tf.keras.Sequential([tf.keras.layers.Dense(4), tf.keras.layers.Dense(3)])
    model.build([None, 5])
    buffer = tf.Variable(tf.zeros([2, 3]), trainable=False)

    def assign_loss(model, ids, step):
        buffer.assign(model(ids))  # the output path of every weight is cut here
        return tf.reduce_sum(tf.convert_to_tensor(buffer) ** 2)

    reports = doctor.check_model_gradients(model, assign_loss, tf.ones([2, 5]),
                                           executions=("eager", "tf.function"))
    for report in reports:
        assert not report.ok
        assert report.problems == {v.path: "None" for v in model.trainable_variables}


@pytest.mark.slow
def test_doctor_mixed_precision_gradients_reach_every_weight():
    reports = doctor.doctor(tiny_config(), max_len=8, all_modes=False,
                                 precisions=("mixed_bfloat16", "mixed_float16"))
    assert {r.precision for r in reports} == {"mixed_bfloat16", "mixed_float16"}
    assert all(r.ok for r in reports), doctor.format_reports(reports)


@pytest.mark.slow
def test_property_head_gets_gradients_in_every_decoder_mode():
    """A jointly trained property head (data.properties): every variable, the head's
    included, gets a gradient for every decoder input and z conditioning, eager, and in tf.function (the
    head is plain Dense layers on z: XLA adds nothing the model tests do not check)."""
    import dataclasses

    from conftest import tiny_config
    from seqvae.training.doctor import doctor

    config = tiny_config()
    config = dataclasses.replace(config, data=dataclasses.replace(config.data, properties="logp,qed"))
    reports = doctor(config, max_len=8, batch_size=3, executions=("eager",))
    reports += doctor(config, max_len=8, batch_size=3, all_modes=False,
                      executions=("tf.function",))
    assert len(reports) == 9 + 1 and all(r.ok for r in reports), [r.problems for r in reports]
    plain = doctor(tiny_config(), max_len=8, batch_size=3, all_modes=False,
                   executions=("eager",))
    assert reports[0].variables == plain[0].variables + 8  # 3 hidden + output layer, kernel + bias


@pytest.mark.slow
def test_a_decoder_reading_the_grammar_is_checked_with_it_and_every_other_mode_without():
    """The demo's decoder reads the SMILES grammar (model.grammar_features): the doctor builds a
    SMILES vocabulary for it, checks it under teacher forcing (its only mode) with the grammar,
    and the other decoder inputs without; every variable gets a gradient in every execution."""
    import dataclasses

    config = tiny_config(grammar_features=True)
    config = dataclasses.replace(config, data=dataclasses.replace(config.data, kekulize=True))
    reports = doctor.doctor(config, executions=("eager", "xla"))
    assert [r.decoder_input for r in reports[::2]] == (
        ["teacher_forcing+grammar"] * 3 + ["free_running"] * 3 + ["latent_only"] * 3)
    assert all(r.ok for r in reports), doctor.format_reports(reports)


def test_example_inputs_are_real_molecules_for_smiles_runs_and_random_ids_otherwise():
    from seqvae.data.vocabulary import EOS_ID, Vocabulary

    vocab, tokenizer, ids = doctor.example_inputs(tiny_config())
    assert tokenizer == "smiles" and "Cl" in vocab and "[O-]" in vocab
    texts = ["".join(vocab.decode(row)) for row in ids.numpy()]
    assert texts == list(doctor.EXAMPLE_SMILES[:4])
    digits = Vocabulary([str(i) for i in range(6)])
    vocab, _, ids = doctor.example_inputs(tiny_config(), digits, "word", max_len=8)
    assert vocab is digits and ids.shape == (4, 8) and (ids.numpy() == EOS_ID).sum() == 4


def test_a_fitted_property_head_gets_gradients_in_every_execution():
    from seqvae.property_fit import fit_head

    rng = np.random.default_rng(0)
    head, mean, std, _ = fit_head(rng.standard_normal((64, 4)), rng.standard_normal((64, 2)),
                                  depth=2, width=8, epochs=1)

    class Fitted:
        names, model = ("logp", "qed"), head

    reports = doctor.check_head_gradients(Fitted(), latent_dim=4)
    assert [r.execution for r in reports] == list(doctor.EXECUTIONS)
    assert all(r.ok and r.variables == 6 for r in reports)
