"""seqvae.inference on tiny runs: the grammar mask on by default for SMILES runs, off on request,
absent for other notations; Kekule runs read aromatic SMILES and give SMILES back."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from conftest import SMILES, tiny_config

from seqvae import inference
from seqvae.data.preparation import encode_texts
from seqvae.data.vocabulary import EOS_ID
from seqvae.training.loop import train
from seqvae.run import load_run


def _syntax_ok(texts):
    from rdkit import Chem, rdBase

    with rdBase.BlockLogs():
        return sum(bool(t) and Chem.MolFromSmiles(t, sanitize=False) is not None for t in texts)


def test_smiles_runs_sample_under_the_grammar_by_default(run):
    masked = inference.sample(run, 200, seed=1)
    assert masked == inference.sample(run, 200, seed=1, grammar=True)
    unmasked = inference.sample(run, 200, seed=1, grammar=False)
    assert masked != unmasked
    # Every masked sample is a prefix the grammar allowed, step by step, except for an <eos>
    # where a sample ran into a dead end (too little room left to close its rings).
    ids = encode_texts(run.codec, masked, on_error="skip", check_molecules=False).ids
    first = run.grammar.first_violation(tf.constant(ids)).numpy()
    rows = np.flatnonzero(first >= 0)
    assert (ids[rows, first[rows]] == EOS_ID).all() and len(rows) <= 0.05 * len(ids)
    assert _syntax_ok(masked) >= 0.95 * len(masked) > _syntax_ok(unmasked)


def test_rejection_sampling_keeps_only_what_the_grammar_accepts_unmasked(run):
    stats = {}
    texts = inference.sample(run, 300, seed=3, rejection=4, stats=stats)
    assert texts == inference.sample(run, 300, seed=3, rejection=4)  # deterministic
    ids = encode_texts(run.codec, texts, on_error="skip", check_molecules=False).ids
    first = run.grammar.first_violation(tf.constant(ids)).numpy()
    rows = np.flatnonzero(first >= 0)  # only a masked fallback row may end in a dead end
    assert (ids[rows, first[rows]] == EOS_ID).all() and len(rows) <= stats["masked"] * len(ids)
    # The tiny run is barely trained: the first round rejects many rows, and what R rounds
    # leave is decoded under the mask.
    from seqvae.model.decoding import prior_z

    ids = []
    inference.decode_id_batches(run, prior_z(300, run.config.model.latent_dim, 3).numpy(),
                                ids.append, greedy=False, seed=3, grammar=False)
    accepted = run.grammar.first_violation(tf.constant(np.concatenate(ids))).numpy() < 0
    assert stats["rejected"] == 1 - accepted.mean() > 0.2
    assert 0 < stats["masked"] < stats["rejected"]
    unmasked = inference.sample(run, 300, seed=3, grammar=False)
    # A row the first round accepts is exactly the unmasked sample, and the masked one (Gumbel-max).
    masked = inference.sample(run, 300, seed=3)
    for row in np.flatnonzero(accepted):
        assert texts[row] == unmasked[row] == masked[row]
    assert sum(texts[row] != masked[row] for row in np.flatnonzero(~accepted)) > 0


def test_a_later_rejection_round_fills_the_pending_rows_from_its_draws_and_spares(run):
    from seqvae.data.preparation import ids_to_texts
    from seqvae.model import decoding

    def decoded(z, seed, batch_size=1000):
        out = []
        inference.decode_id_batches(run, z, out.append, greedy=False, seed=seed,
                                    batch_size=batch_size, reject=True)
        return tuple(np.concatenate(parts) for parts in zip(*out))

    z = inference.prior_draw(run, 200, 6)
    stats = {}
    texts, used = inference.rejection_sample(run, z, 2, seed=6, stats=stats, return_z=True)
    ids, bad = decoded(z, 6)
    pending = np.flatnonzero(bad)
    for row in np.flatnonzero(~bad):  # the first round's accepted rows keep their own z
        assert texts[row] == ids_to_texts(run.codec, ids[row:row + 1])[0]
    np.testing.assert_array_equal(used[~bad], z[~bad])
    # Round 2: one draw of the pending rows and spares (one batch: at most 2P rows)
    draws = int(decoding.rejection_attempts(len(pending), bad.sum(), len(bad)))
    assert len(pending) < draws <= 2 * len(pending)
    seed = inference.sampling._derived_seed(6, 1)
    drawn_z = inference.prior_draw(run, draws, seed)
    ids, bad = decoded(drawn_z, seed, batch_size=draws)
    kept = np.flatnonzero(~bad)[:len(pending)]
    filled, rest = pending[:len(kept)], pending[len(kept):]
    assert [texts[row] for row in filled] == ids_to_texts(run.codec, ids[kept])
    np.testing.assert_array_equal(used[filled], drawn_z[kept])
    # what is left goes under the mask from draws the round rejected
    np.testing.assert_array_equal(used[rest], drawn_z[np.flatnonzero(bad)[:len(rest)]])
    assert stats["masked"] == len(rest) / 200 < stats["rejected"] ** 2  # fewer than P q left


def test_the_grammar_check_under_xla_finds_what_the_plain_one_finds(run, monkeypatch):
    from seqvae.model.decoding import prior_z

    ids = []
    inference.decode_id_batches(run, prior_z(250, run.config.model.latent_dim, 4).numpy(),
                                ids.append, greedy=False, seed=4, grammar=False)
    ids = np.concatenate(ids)
    plain = inference.first_violations(run, ids, 100, compiled=False)  # batches 100, 100, 50
    compiled = inference.first_violations(run, ids, 100, compiled=True)  # the 50 padded
    assert plain.shape == (250,) and (plain >= 0).any() and (plain < 0).any()
    np.testing.assert_array_equal(compiled, plain)
    # Rejection sampling of COMPILED_MASK_MIN rows or more checks under XLA: the same texts.
    from seqvae.model import grammar_decoding

    small = inference.sample(run, 150, seed=5, rejection=3, batch_size=100)
    monkeypatch.setattr(inference.texts, "COMPILED_MASK_MIN", 150)
    monkeypatch.setattr(grammar_decoding, "COMPILED_MIN_ROWS", 2)  # (256 by default)
    assert inference.sample(run, 150, seed=5, rejection=3, batch_size=100) == small
    rejecting = [key[1:] for key in run.compiled if key[1] == "decoder" and key[-1]]
    assert {key[-2] for key in rejecting} == {False, True}  # compiled_mask both ways


def test_rejection_sampling_is_moot_without_a_choice_and_refused_without_the_grammar(run):
    import pytest

    from seqvae.errors import SeqvaeError

    stats = {}
    assert inference.sample(run, 50, seed=1, rejection=0, stats=stats) == inference.sample(run, 50, seed=1)
    assert stats == {"rejected": 0.0, "masked": 0.0}
    with pytest.raises(SeqvaeError, match="under the grammar"):
        inference.sample(run, 5, rejection=2, grammar=False)
    trained_masked = dataclasses.replace(run, config=dataclasses.replace(
        run.config, train=dataclasses.replace(run.config.train, grammar_softmax=True)))
    assert inference.sample(trained_masked, 50, seed=1, rejection=3) == inference.sample(run, 50, seed=1)


def test_a_run_can_sample_by_rejection_by_default(run):
    chosen = dataclasses.replace(run, config=dataclasses.replace(
        run.config, model=dataclasses.replace(run.config.model, rejection_rounds=3)))
    by_rejection = inference.sample(run, 60, seed=4, rejection=3)
    assert inference.sample(chosen, 60, seed=4) == by_rejection != inference.sample(run, 60, seed=4)
    assert inference.sample(chosen, 60, seed=4, rejection=0) == inference.sample(run, 60, seed=4)
    # --no-grammar with the run's default: no grammar at all, not an error
    assert inference.sample(chosen, 60, seed=4, grammar=False) == inference.sample(
        run, 60, seed=4, grammar=False)


def test_many_samples_run_the_mask_under_xla_with_the_same_texts(run, monkeypatch):
    from seqvae.model import grammar_decoding

    plain = inference.sample(run, 300, seed=2)
    monkeypatch.setattr(inference.texts, "COMPILED_MASK_MIN", 300)  # (10,000 by default)
    monkeypatch.setattr(grammar_decoding, "COMPILED_MIN_ROWS", 2)
    assert inference.sample(run, 300, seed=2) == plain
    assert any(key[-2] is True for key in run.compiled if key[1] == "decoder")  # the XLA one ran
    # A batch under COMPILED_MIN_ROWS goes to the plain state machine, chosen per batch.
    monkeypatch.setattr(grammar_decoding, "COMPILED_MIN_ROWS", 200)
    called, original = [], inference.compiled.compiled_decoder

    def spy(*args, compiled_mask=False, **kwargs):
        decode_ids = original(*args, compiled_mask=compiled_mask, **kwargs)

        def call(z, *rest, **forced):
            called.append((compiled_mask, len(z)))
            return decode_ids(z, *rest, **forced)

        call.get_concrete_function = decode_ids.get_concrete_function
        return call

    monkeypatch.setattr(inference.compiled, "compiled_decoder", spy)
    texts = inference.sample(run, 300, seed=2, batch_size=250)
    assert called == [(True, 250), (False, 50)]
    monkeypatch.setattr(inference.texts, "COMPILED_MASK_MIN", 10_000)
    assert inference.sample(run, 300, seed=2, batch_size=250) == texts
    assert called[2:] == [(False, 250), (False, 50)]


def test_decode_reconstruct_interpolate_take_the_grammar_switch(run):
    z = np.random.default_rng(0).normal(size=(20, run.config.model.latent_dim)).astype(np.float32)
    assert inference.decode(run, z) == inference.decode(run, z, grammar=True)
    result = inference.reconstruct(run, SMILES[:8], num_samples=0, grammar=False)
    assert 0.0 <= result["exact_match_mean_z"] <= 1.0
    path = inference.interpolate(run, "CCO", "c1ccccc1", steps=4, grammar=False)
    assert [t for t, _ in path] == [0.0, 1 / 3, 2 / 3, 1.0]


def test_runs_that_are_not_smiles_have_no_grammar(tmp_path):
    config = tiny_config()
    config = dataclasses.replace(
        config, data=dataclasses.replace(config.data, tokenizer="char"),
        train=dataclasses.replace(config.train, max_steps=4, epochs=100))
    train(config, str(tmp_path / "char"), data=["hello", "world", "help", "word"] * 4)
    char_run = load_run(str(tmp_path / "char"))
    assert char_run.grammar is None
    assert inference.sample(char_run, 5, seed=0) == inference.sample(char_run, 5, seed=0, grammar=False)


def test_kekule_runs_read_aromatic_smiles_and_decode_smiles(tmp_path):
    from seqvae.data.chemistry import canonical_smiles

    config = tiny_config()
    config = dataclasses.replace(
        config, data=dataclasses.replace(config.data, kekulize=True),
        train=dataclasses.replace(config.train, max_steps=6, epochs=100))
    train(config, str(tmp_path / "kekule"), data=SMILES)
    run = load_run(str(tmp_path / "kekule"))
    assert run.codec.kekulize and "c" not in run.vocab and "=" in run.vocab
    mean, _ = inference.encode(run, ["c1ccccc1O", "CCO"])  # aromatic input is converted
    assert mean.shape == (2, config.model.latent_dim)
    run.raw_output = True  # as the model writes them
    samples = inference.sample(run, 50, seed=0)
    assert not any(ch in "".join(samples) for ch in "cno")  # Kekule form: no aromatic atoms
    run.raw_output = False  # as seqvae gives them to its users: RDKit's canonical SMILES
    assert inference.sample(run, 50, seed=0) == [canonical_smiles(s) or s for s in samples]
    valid = [s for s in samples if canonical_smiles(s) is not None]
    assert len(valid) >= 0.9 * len(samples)  # grammar + Kekule form: valence is all that is left


def test_beam_search_decodes_every_row_and_ranks_by_likelihood(run):
    z = np.random.default_rng(1).normal(size=(6, run.config.model.latent_dim)).astype(np.float32)
    beam = inference.decode(run, z, beam_width=4)
    assert len(beam) == 6
    assert inference.decode(run, z, beam_width=1) == inference.decode(run, z)  # width 1: greedy
    result = inference.reconstruct(run, SMILES[:8], num_samples=0, beam_width=3)
    assert result["decoding"] == "beam 3" and 0.0 <= result["exact_match_mean_z"] <= 1.0


def test_encode_to_file_streams_the_same_values_as_encode(run, tmp_path):
    # 3 chunks of 16 lines, batches of 5 sorted by length: every row must land where encode puts it
    texts = SMILES + ["xx", "C1CC"] + SMILES[:6]
    data = tmp_path / "in.smi"
    data.write_text("# a comment\n" + "\n".join(texts) + "\n")
    means, log_vars = inference.encode(run, str(data))
    seen = []
    result = inference.encode_to_file(run, str(data), str(tmp_path / "z.npy"),
                                      str(tmp_path / "lv.npy"), batch_size=5, chunk_size=16,
                                      progress=lambda read, total, rate: seen.append((read, total)))
    assert result["rows"] == len(texts) and result["encoded"] == len(texts) - 2
    assert result["skipped"] == 2 and result["skipped_by_kind"] == {"invalid": 2}
    assert result["messages"][0].startswith(f"{data}:42: invalid SMILES")
    streamed = np.load(tmp_path / "z.npy", allow_pickle=False)
    assert streamed.shape == (len(texts), means.shape[1]) and streamed.dtype == np.float32
    invalid = [len(SMILES), len(SMILES) + 1]  # "xx", "C1CC": NaN rows, the others in place
    assert np.isnan(streamed).all(axis=1).tolist() == [i in invalid for i in range(len(texts))]
    kept = [i for i in range(len(texts)) if i not in invalid]
    np.testing.assert_allclose(streamed[kept], means, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "lv.npy")[kept], log_vars, rtol=1e-5, atol=1e-6)
    assert [read for read, _ in seen] == [16, 32, 48]
    assert all(total == len(texts) + 1 for _, total in seen)  # lines: an upper bound


def test_encode_to_file_strict_and_nothing_to_encode(run, tmp_path):
    import pytest

    from seqvae.errors import SeqvaeError

    data = tmp_path / "bad.smi"
    data.write_text("CCO\nxx\n")
    with pytest.raises(SeqvaeError, match=r"bad\.smi:2: invalid SMILES"):
        inference.encode_to_file(run, str(data), str(tmp_path / "z.npy"), strict=True)
    data.write_text("xx\nC1CC\n")
    with pytest.raises(SeqvaeError, match="nothing to encode"):
        inference.encode_to_file(run, str(data), str(tmp_path / "z.npy"))
    assert not list(tmp_path.glob("*.npy")) and not list(tmp_path.glob(".tmp-*"))


def test_compiled_functions_are_made_once_per_run_and_setting(run):
    assert inference.compiled_encoder(run) is inference.compiled_encoder(run)
    greedy = inference.compiled_decoder(run)
    assert greedy is inference.compiled_decoder(run, greedy=True, grammar=True)
    assert greedy is not inference.compiled_decoder(run, grammar=False)
    assert greedy is not inference.compiled_decoder(run, beam_width=3)
    z = np.zeros((2, run.config.model.latent_dim), np.float32)
    first = inference.decode(run, z)
    traces = greedy.experimental_get_tracing_count()
    assert inference.decode(run, z) == first  # a second call of decode traces nothing new
    assert greedy.experimental_get_tracing_count() == traces


@pytest.mark.parametrize("grammar", [True, False])
def test_every_temperature_samples_through_one_graph_with_the_same_ids(run, grammar):
    """Sampling passes its temperature as a tensor: the ids of a graph with the temperature
    built in, and a second temperature traces nothing new (the explorer's slider)."""
    from seqvae.model import randomness

    z = np.random.default_rng(0).standard_normal((64, run.config.model.latent_dim)).astype(np.float32)
    for temperature in (0.7, 1.3):
        baked = inference.compiled_decoder(run, False, temperature, 0, grammar)
        expected = baked(tf.constant(z), randomness.fold_in(randomness.as_seed(5), 0)).numpy()
        got = []
        inference.decode_id_batches(run, z, got.append, greedy=False, temperature=temperature,
                                    seed=5, grammar=grammar)
        np.testing.assert_array_equal(got[0], expected)
    shared = inference.compiled_decoder(run, False, 1.0, 0, grammar)
    traced = shared.experimental_get_tracing_count()
    inference.decode(run, z, greedy=False, temperature=0.55, seed=1, grammar=grammar)
    assert shared.experimental_get_tracing_count() == traced


def test_batches_of_every_size_share_one_trace(run):
    """A sample's last batch and rejection's later rounds differ in size from the first batch:
    the decoder is traced once for any size, not again for each."""
    fresh = dataclasses.replace(run, compiled={})
    inference.sample(fresh, 250, seed=7, batch_size=100)  # batches 100, 100, 50
    inference.sample(fresh, 230, seed=7, batch_size=100, rejection=3)  # later rounds: any size
    inference.decode(fresh, np.zeros((3, run.config.model.latent_dim), np.float32))
    decoders = {key[1:]: f for key, f in fresh.compiled.items() if key[1] == "decoder"}
    masked = decoders[("decoder", False, 1.0, 0, True, 0, False, False, False)]
    rejecting = decoders[("decoder", False, 1.0, 0, True, 0, False, False, True)]
    greedy = decoders[("decoder", True, 1.0, 0, True, 0, False, False, False)]
    assert [f.experimental_get_tracing_count() for f in (masked, rejecting, greedy)] == [1, 1, 1]
