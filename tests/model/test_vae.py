"""Model tests: every weight gets a gradient in every mode; overfitting; serialization."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from conftest import tiny_config

from seqvae.config import DECODER_INPUTS, Z_CONDITIONINGS, ModelConfig
from seqvae.errors import SeqvaeError
from seqvae.model import decoding
from seqvae.model.vae import SequenceVAE
from seqvae.training import doctor
from seqvae.training.objective import compute_losses


@pytest.mark.parametrize("decoder_input", DECODER_INPUTS)
@pytest.mark.parametrize("z_conditioning", Z_CONDITIONINGS)
def test_every_weight_gets_a_gradient_eager_graph_xla(decoder_input, z_conditioning):
    """Every decoder mode eagerly and in tf.function; under XLA with ``both`` conditionings,
    whose graph holds the ops of ``init`` and ``concat`` together (an XLA compile per mode is
    most of this test's time)."""
    config = tiny_config(decoder_input=decoder_input, z_conditioning=z_conditioning,
                         decoder_dropout=0.1)
    ids = doctor.example_batch(vocab_size=12, max_len=10)
    executions = ["eager", "tf.function"] + (["xla"] if z_conditioning == "both" else [])
    reports = doctor.check_gradients(config, ids, vocab_size=12, executions=tuple(executions))
    assert [r.execution for r in reports] == executions
    for report in reports:
        assert report.problems == {}, report
        assert report.loss_matches_eager, report
        assert np.isfinite(report.loss)
    # eager and graph agree tightly (same stateless seed)
    assert abs(reports[0].loss - reports[1].loss) < 1e-5


@pytest.mark.parametrize("decoder_input", ["teacher_forcing", "free_running"])
def test_language_model_control_ignores_z_and_trains_every_weight(decoder_input):
    """``z_conditioning=none``: the decoder is a language model (the VAE's same-budget control):
    its logits do not depend on z, its weights get the reconstruction's gradients and the
    encoder KL's, eagerly and in tf.function."""
    config = tiny_config(decoder_input=decoder_input, z_conditioning="none")
    ids = doctor.example_batch(vocab_size=12, max_len=10)
    for report in doctor.check_gradients(config, ids, vocab_size=12,
                                         executions=("eager", "tf.function")):
        assert report.ok, report
    model = SequenceVAE(config.model, 12, 10).build_weights()
    inputs = model.decoder_inputs(ids)
    z = tf.random.stateless_normal([int(ids.shape[0]), config.model.latent_dim], seed=[1, 2])
    np.testing.assert_allclose(model.decoder(z, inputs), model.decoder(3 * z + 1, inputs),
                               atol=1e-6)
    assert not any("z_to_state" in v.path for v in model.trainable_variables)
    with pytest.raises(SeqvaeError, match="latent_only"):
        tiny_config(decoder_input="latent_only", z_conditioning="none")


@pytest.mark.parametrize("encoder,extra", [("gru", {"encoder_bidirectional": True, "encoder_layers": 2}),
                                           ("gru", {"init_per_layer": False}),
                                           ("conv", {"encoder_layers": 2}),
                                           ("dense", {}),
                                           ("gru", {"embedding_dim": 6})])
def test_encoders_and_embeddings_get_gradients(encoder, extra):
    """Eager and tf.function for each; XLA too where the ops differ from the default model's
    (whose XLA path the test above checks): conv, dense and the bidirectional GRU."""
    config = tiny_config(encoder=encoder, **extra)
    ids = doctor.example_batch(vocab_size=12, max_len=10)
    xla = encoder != "gru" or extra.get("encoder_bidirectional")
    executions = ("eager", "tf.function", "xla") if xla else ("eager", "tf.function")
    reports = doctor.check_gradients(config, ids, vocab_size=12, executions=executions)
    assert [r.execution for r in reports] == list(executions)
    for report in reports:
        assert report.ok, report


def test_one_compiled_step_changes_every_weight():
    from seqvae.training.steps import build_training, make_train_step

    config = tiny_config()
    model, optimizer, counters = build_training(config, 10, 12, 10)
    before = [v.numpy().copy() for v in model.trainable_variables]
    step = make_train_step(model, optimizer, config.train, 10, counters)
    step(doctor.example_batch(12, 10))
    for old, variable in zip(before, model.trainable_variables):
        assert not np.array_equal(old, variable.numpy()), variable.path
    assert int(counters["step"].numpy()) == 1


@pytest.mark.parametrize("z_conditioning", ["init", "concat", "both"])
def test_one_loop_decoder_equals_layer_by_layer_scans(z_conditioning):
    """Teacher forcing steps every layer in one loop; it equals running the layers one by one."""
    config = tiny_config(z_conditioning=z_conditioning, decoder_layers=3, init_per_layer=True)
    model = SequenceVAE(config.model, 12, 10).build_weights()
    decoder = model.decoder
    z = tf.random.stateless_normal([3, config.model.latent_dim], seed=[5, 6])
    inputs = model.decoder_inputs(tf.constant([[5, 6, 7, 2, 0], [8, 2, 0, 0, 0], [9, 9, 9, 9, 2]]))
    features = tf.one_hot(inputs, 12)
    if decoder.uses_concat:
        features = tf.concat([features, tf.tile(z[:, None], [1, 5, 1])], axis=-1)
    for gru, state in zip(decoder.grus, decoder.initial_states(z)):
        features, _ = gru.scan(features, state)
    expected = decoder.dense_logits(features)
    np.testing.assert_allclose(decoder(z, inputs), expected, atol=1e-5)


ENCODER_VARIANTS = [{}, {"encoder_bidirectional": True, "encoder_layers": 2},
                    {"encoder": "conv", "encoder_layers": 2}, {"encoder": "dense"}]


@pytest.mark.parametrize("extra", ENCODER_VARIANTS, ids=["gru", "bigru", "conv", "dense"])
def test_encoder_ignores_padding(extra):
    """q(z|x) of a sequence depends only on its tokens up to ``<eos>``: not on how much
    ``<pad>`` follows, nor on what the other rows of the batch hold after its end."""
    model = SequenceVAE(tiny_config(**extra).model, 12, 10).build_weights()
    short = tf.constant([[5, 6, 7, 2, 0, 0, 0, 0, 0, 0]])
    mean, log_var = model.encoder(short)
    # Real, different tokens at every position after short's end (in the other row): a batch
    # is padded to its longest row, so short is encoded with 6 steps of padding next to them.
    beside_a_longer_row = tf.constant([[5, 6, 7, 2, 0, 0, 0, 0, 0, 0],
                                       [8, 9, 10, 11, 8, 9, 10, 11, 8, 2]])
    variants = {"less padding": short[:, :6], "no padding": short[:, :4],
                "beside a longer row": beside_a_longer_row}
    for name, ids in variants.items():
        other_mean, other_log_var = model.encoder(ids)
        np.testing.assert_allclose(other_mean.numpy()[:1], mean.numpy(), atol=1e-6, err_msg=name)
        np.testing.assert_allclose(other_log_var.numpy()[:1], log_var.numpy(), atol=1e-6,
                                   err_msg=name)
    # The comparison can fail: the same tokens with one more real token differ.
    changed, _ = model.encoder(tf.constant([[5, 6, 7, 8, 2, 0, 0, 0, 0, 0]]))
    assert np.abs(changed.numpy() - mean.numpy()).max() > 1e-4


@pytest.mark.parametrize("encoder", [dict(encoder="gru"), dict(encoder="gru", encoder_layers=2,
                                                                encoder_bidirectional=True),
                                     dict(encoder="conv"), dict(encoder="dense")])
def test_encoder_ignores_tokens_after_the_first_pad(encoder):
    """The first <pad> ends the sequence: what follows it is not encoded."""
    model = SequenceVAE(tiny_config(**encoder).model, 12, 10).build_weights()
    short = tf.constant([[5, 6, 7, 2, 0, 0, 0, 0, 0, 0]])
    garbage_after_end = tf.constant([[5, 6, 7, 2, 0, 0, 9, 9, 9, 9]])  # non-pad after the end
    mean_a, log_var_a = model.encoder(short)
    mean_b, log_var_b = model.encoder(garbage_after_end)
    np.testing.assert_allclose(mean_a.numpy(), mean_b.numpy(), atol=1e-6)
    np.testing.assert_allclose(log_var_a.numpy(), log_var_b.numpy(), atol=1e-6)


def _overfit(decoder_input: str, steps: int = 300):
    config = tiny_config(decoder_input=decoder_input, encoder_units=32, decoder_units=32,
                         latent_dim=8, decoder_layers=1)
    config = dataclasses.replace(config, train=dataclasses.replace(
        config.train, kl_schedule="constant", kl_weight_end=1e-4, learning_rate=1e-2))
    ids = doctor.example_batch(vocab_size=10, max_len=8, batch_size=4, seed=3)
    from seqvae.training.steps import build_training, make_train_step

    model, optimizer, counters = build_training(config, 8, 10, steps)
    step = make_train_step(model, optimizer, config.train, steps, counters)
    for _ in range(steps):
        step(ids)
    mean, _ = model.encoder(ids)
    decoded = decoding.sample_from_z(model, mean, greedy=True).numpy()
    return decoded, ids.numpy()


@pytest.mark.parametrize("decoder_input", DECODER_INPUTS)
def test_tiny_model_overfits_tiny_batch(decoder_input):
    decoded, ids = _overfit(decoder_input)
    np.testing.assert_array_equal(decoded, ids)  # reconstruction accuracy 1.0


def test_config_round_trip_and_identical_outputs_after_weight_copy():
    config = tiny_config()
    model = SequenceVAE(config.model, 12, 10).build_weights()
    clone = SequenceVAE.from_config(model.get_config()).build_weights()
    clone.set_weights(model.get_weights())
    ids = doctor.example_batch(12, 10)
    seed = tf.constant([4, 5])
    a = model(ids, training=False, seed=seed)
    b = clone(ids, training=False, seed=seed)
    np.testing.assert_array_equal(a["logits"].numpy(), b["logits"].numpy())
    assert clone.config == ModelConfig(**model.get_config()["config"])


def test_free_running_gradients_reach_decoder_in_graph_mode_on_classic_one_hot_data():
    """The classic example: one-hot data (batch, 3, 4), free-running decoder, graph mode."""
    from seqvae.data.preparation import prepare_data

    rng = np.random.default_rng(0)
    one_hot = np.eye(4, dtype=np.float32)[rng.integers(0, 4, size=(3, 3))]
    config = tiny_config(decoder_input="free_running", encoder="dense", latent_dim=5)
    prepared = prepare_data(config.data, one_hot)
    assert prepared.ids.shape == (3, 4)  # 3 classes per row + <eos>
    model = SequenceVAE(config.model, len(prepared.vocab), prepared.max_len).build_weights()

    @tf.function
    def gradients(ids):
        with tf.GradientTape() as tape:
            loss = compute_losses(model, ids, tf.constant(1, tf.int64), config.train, 1)["loss"]
        return tape.gradient(loss, model.encoder.trainable_variables + model.decoder.trainable_variables)

    grads = gradients(tf.constant(prepared.ids))
    assert all(g is not None for g in grads)
    assert all(np.isfinite(tf.convert_to_tensor(g).numpy()).all() for g in grads)
