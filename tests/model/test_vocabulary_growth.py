"""A trained model's weights carried over to a larger vocabulary."""

import numpy as np
import pytest
import tensorflow as tf
from conftest import tiny_config

from seqvae.errors import SeqvaeError
from seqvae.model import vocabulary_growth as growth
from seqvae.model.vae import SequenceVAE

OLD = ["<pad>", "<bos>", "<eos>", "<unk>", "C", "N", "O", "1", "2", "=", "(", ")", "Br"]
NEW = OLD + ["[C@@H]", "[N+]", "[O-]", "P", "I", "3", "/", ".", "[Pt]"]


def test_each_new_token_starts_from_the_token_it_most_resembles():
    trained = OLD[4:]
    assert [growth.analog_of(t, trained) for t in NEW[len(OLD):]] == [
        "C", "N", "O", "N", "Br", "2", None, None, "C"]
    ids = growth.analog_ids(OLD, NEW)
    assert ids.tolist() == [4, 5, 6, 5, 12, 8, growth.MEAN, growth.MEAN, 4]
    assert growth.analog_ids(OLD, NEW, smiles=False).tolist() == [growth.MEAN] * 9
    with pytest.raises(SeqvaeError, match="trained tokens first"):
        growth.analog_ids(OLD, ["C"] + OLD)


def test_grow_inserts_new_slices_after_the_vocabulary_and_keeps_what_follows():
    kernel = np.arange(8 * 2, dtype=np.float32).reshape(8, 2)  # 6 token rows, then 2 z rows
    grown = growth.grow(kernel, (10, 2), 6, np.array([5, growth.MEAN]), bias_shift=0.5)
    np.testing.assert_array_equal(grown[:6], kernel[:6])
    np.testing.assert_array_equal(grown[8:], kernel[6:])  # z's rows keep their values
    np.testing.assert_array_equal(grown[6], kernel[5] + 0.5)
    np.testing.assert_array_equal(grown[7], kernel[4:6].mean(axis=0) + 0.5)
    columns = growth.grow(kernel.T, (2, 10), 6, np.array([4, 5]))
    np.testing.assert_array_equal(columns[:, 6:8], kernel.T[:, [4, 5]])
    np.testing.assert_array_equal(columns[:, 8:], kernel.T[:, 6:])
    assert growth.grow(kernel, (8, 2), 6, np.array([], np.int64)) is kernel
    with pytest.raises(SeqvaeError, match="cannot grow"):
        growth.grow(kernel, (11, 2), 6, np.array([4, 5]))


def test_mean_slices_average_the_trained_tokens_not_the_special_ones():
    value = np.array([[100.0], [100.0], [100.0], [100.0], [1.0], [3.0]])
    grown = growth.grow(value, (7, 1), 6, np.array([growth.MEAN]))
    assert grown[6, 0] == pytest.approx(2.0)


@pytest.fixture(scope="module")
def models():
    config = tiny_config().model
    trained = SequenceVAE(config, len(OLD), 20).build_weights()
    grown = SequenceVAE(config, len(NEW), 20).build_weights()
    count = growth.transfer(trained.weights, grown.weights, len(OLD), growth.analog_ids(OLD, NEW))
    return trained, grown, count


def test_the_grown_model_reads_and_writes_the_old_tokens_as_the_trained_one(models):
    trained, grown, count = models
    assert count == 4  # the encoder's and the decoder's first GRU kernel, the logits' two
    ids = tf.constant([[4, 5, 9, 6, 2, 0], [6, 4, 4, 2, 0, 0]])
    for a, b in zip(trained.encoder(ids), grown.encoder(ids)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)
    z = tf.random.stateless_normal([2, tiny_config().model.latent_dim], seed=[1, 2])
    inputs = trained.decoder_inputs(ids)
    old = trained.decoder(z, inputs).numpy()
    new = grown.decoder(z, inputs).numpy()
    np.testing.assert_allclose(new[..., :len(OLD)], old, atol=1e-5)
    # a new token's logit is its analog's, NEW_TOKEN_BIAS lower: [C@@H] starts as C, less likely
    np.testing.assert_allclose(new[..., len(OLD)], old[..., 4] + growth.NEW_TOKEN_BIAS, atol=1e-5)


def test_transfer_refuses_another_architecture():
    config = tiny_config().model
    trained = SequenceVAE(config, len(OLD), 20).build_weights()
    other = SequenceVAE(tiny_config(decoder_layers=3).model, len(OLD), 20).build_weights()
    with pytest.raises(SeqvaeError, match="architectures differ"):
        growth.transfer(trained.weights, other.weights, len(OLD), growth.analog_ids(OLD, OLD))


def test_keep_missing_sets_what_matches_and_leaves_the_rest():
    config = tiny_config().model
    trained = SequenceVAE(config, len(OLD), 20).build_weights()
    other = SequenceVAE(config, len(OLD), 20, num_properties=2).build_weights()
    before = {w.path: w.numpy() for w in other.weights}
    growth.transfer(trained.weights, other.weights, len(OLD), growth.analog_ids(OLD, OLD),
                    keep_missing=True)
    sources = {growth.weight_key(w.path): w.numpy() for w in trained.weights}
    kept = 0
    for weight in other.weights:
        source = sources.get(growth.weight_key(weight.path))
        expected = before[weight.path] if source is None else source
        kept += source is None
        np.testing.assert_array_equal(weight.numpy(), expected)
    assert kept > 0  # the property head's weights, which the trained model lacks
