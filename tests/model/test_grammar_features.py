"""``model.grammar_features``: the decoder reads the SMILES grammar's state at every step, the
same in training (teacher forcing) as in decoding, with a gradient for every weight."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from conftest import SMILES, tiny_config

from seqvae.data.tokenizers import SmilesTokenizer
from seqvae.data.vocabulary import BOS_ID, Vocabulary
from seqvae.errors import SeqvaeError
from seqvae.model import decoding
from seqvae.model.grammar import SmilesGrammar
from seqvae.model.smiles_tokens import ATOM, FEATURE_DIM, RING
from seqvae.model.vae import SequenceVAE
from seqvae.training import doctor
from seqvae.training.objective import compute_losses

TOKENIZER = SmilesTokenizer()
MAX_LEN = 24


def _setup():
    vocab = Vocabulary.fit([TOKENIZER.tokenize(s) for s in SMILES])
    grammar = SmilesGrammar.from_tokens(vocab.tokens)
    ids = np.zeros((6, MAX_LEN), np.int32)
    for row, text in enumerate(["C1CC1", "CC(=O)O", "c1ccccc1", "CCN(CC)CC", "CC#N", "O"]):
        encoded = vocab.encode(TOKENIZER.tokenize(text), add_eos=True)
        ids[row, :len(encoded)] = encoded
    return vocab, grammar, tf.constant(ids)


def _model(vocab, grammar, **model):
    config = tiny_config(grammar_features=True, **model)
    return config, SequenceVAE(config.model, len(vocab), MAX_LEN, grammar=grammar).build_weights()


def test_features_by_hand():
    vocab, grammar, ids = _setup()
    features = grammar.teacher_forced_features(ids, MAX_LEN).numpy()  # (B, T, F)
    assert features.shape == (6, MAX_LEN, FEATURE_DIM)
    c1cc1 = features[0]  # before C, 1, C, C, 1, <eos>
    assert c1cc1[0, :10].argmax() != ATOM  # nothing before the first atom
    assert c1cc1[1, ATOM] == 1 and c1cc1[2, RING] == 1
    assert [c1cc1[t, 11] for t in range(6)] == [0, 0, 0.25, 0.25, 0.25, 0]  # open ring labels
    assert c1cc1[0, 15] == 1.0 and np.isclose(c1cc1[3, 15], 1 - 3 / MAX_LEN)  # room left
    branch = features[1]  # CC(=O)O: inside the branch after "("
    assert branch[3, 10] == 0.25 and branch[6, 10] == 0  # depth 1 after "(", 0 after ")"
    assert branch[4, 12] == pytest.approx(2 / 3)  # the pending "=" bond


def test_decoding_reads_the_features_training_read():
    """Step by step with the true tokens, the decoder's logits equal the teacher-forced pass's."""
    vocab, grammar, ids = _setup()
    _, model = _model(vocab, grammar)
    z = model.encoder(ids)[0]
    teacher = model.decoder(z, model.decoder_inputs(ids), features=grammar.teacher_forced_features(
        ids, MAX_LEN)).numpy()
    step, state = decoding.decoder_step_fn(model.decoder, z, banned_ids=())
    tokens = tf.fill([ids.shape[0]], BOS_ID)
    for t in range(ids.shape[1]):
        logits, state = step(tokens, state)
        np.testing.assert_allclose(logits.numpy(), teacher[:, t], atol=1e-5)
        tokens = ids[:, t]


@pytest.mark.parametrize("z_conditioning", ["init", "both"])
def test_every_weight_gets_a_gradient_with_features(z_conditioning):
    vocab, grammar, ids = _setup()
    config, model = _model(vocab, grammar, z_conditioning=z_conditioning, decoder_dropout=0.1)
    tcfg = dataclasses.replace(config.train, kl_schedule="constant", kl_weight_end=0.1)
    reports = doctor.check_model_gradients(
        model, lambda model, batch, step: compute_losses(model, batch, step, tcfg, 1)["loss"],
        ids, ("eager", "tf.function"))
    for report in reports:
        assert report.ok, report
    assert abs(reports[0].loss - reports[1].loss) < 1e-5


def test_the_feature_rows_change_the_output():
    vocab, grammar, ids = _setup()
    _, model = _model(vocab, grammar)
    out = model(ids, sample_z=False)["logits"].numpy()
    kernel = model.decoder.grus[0].kernel
    kernel.assign(tf.concat([kernel[:-FEATURE_DIM], kernel[-FEATURE_DIM:] * 0], 0))
    assert not np.allclose(out, model(ids, sample_z=False)["logits"].numpy(), atol=1e-6)


def test_a_model_with_features_needs_a_grammar():
    vocab, _, _ = _setup()
    config = tiny_config(grammar_features=True)
    with pytest.raises(SeqvaeError, match="grammar_features needs a SMILES run"):
        SequenceVAE(config.model, len(vocab), MAX_LEN)


def test_the_config_refuses_features_without_smiles_or_teacher_forcing():
    config = tiny_config(grammar_features=True)
    with pytest.raises(SeqvaeError, match="needs data.tokenizer=smiles, got 'selfies'"):
        dataclasses.replace(config, data=dataclasses.replace(config.data, tokenizer="selfies"))
    for model, train in (({"decoder_input": "free_running"}, {}),
                         ({"decoder_input": "latent_only"}, {}), ({}, {"scheduled_sampling": 0.2})):
        with pytest.raises(SeqvaeError, match="needs model.decoder_input=teacher_forcing"):
            dataclasses.replace(config, model=dataclasses.replace(config.model, **model),
                                train=dataclasses.replace(config.train, **train))


@pytest.mark.parametrize("reject, compiled", [(False, False), (False, True), (True, True),
                                              (True, False)])
def test_one_state_machine_serves_the_features_and_the_mask(reject, compiled, monkeypatch):
    """Decoding a features decoder under the mask (or by rejection) runs the grammar once, its
    stepper inside the decoder's step: the same ids as a second, separate state machine
    wrapped around it (``masked_step_fn``), plain or under XLA; beam search too."""
    from seqvae.model import grammar_decoding

    monkeypatch.setattr(grammar_decoding, "COMPILED_MIN_ROWS", 2)
    vocab, grammar, ids = _setup()
    _, model = _model(vocab, grammar)
    z = tf.random.stateless_normal([40, model.config.latent_dim], [3, 4]) * 2.0
    seed = tf.constant([5, 6])
    shared = decoding.sample_from_z(model, z, MAX_LEN, seed=seed, grammar=grammar,
                                    compiled_mask=compiled, reject=reject)
    step, state = decoding.decoder_step_fn(model.decoder, z)
    step, state = grammar.masked_step_fn(step, state, 40, MAX_LEN, compiled=compiled,
                                         reject=reject)
    check = grammar.rejection_check(40, MAX_LEN, compiled) if reject else None
    separate = decoding.decode_loop(step, state, 40, MAX_LEN, BOS_ID, 2, seed=seed, compact=True,
                                    stop_fn=check)
    for a, b in zip(tf.nest.flatten(shared), tf.nest.flatten(separate)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    if reject:
        assert 0 < shared[1].numpy().sum() < 40  # some rows rejected, some kept
    else:
        beam = decoding.sample_from_z(model, z, MAX_LEN, grammar=grammar, beam_width=3,
                                      compiled_mask=compiled)
        step, state = decoding.decoder_step_fn(model.decoder, z)
        step, state = grammar.masked_step_fn(step, state, 40, MAX_LEN, compiled=compiled)
        np.testing.assert_array_equal(beam.numpy(), decoding.beam_search(
            step, state, 40, MAX_LEN, 3, BOS_ID, 2)[0].numpy())
