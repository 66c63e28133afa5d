"""Training loop tests: graph/eager agreement, exact resume, stop conditions, run files."""

import dataclasses
import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import SMILES, tiny_config

from seqvae.data.preparation import prepare_data
from seqvae.errors import SeqvaeError
from seqvae.files import read_jsonl
from seqvae.training import doctor
from seqvae.training.loop import build_training, train
from seqvae.training.objective import compute_losses
from seqvae.training.rundir import load_run


def _with_train(config, **changes):
    return dataclasses.replace(config, train=dataclasses.replace(config.train, **changes))


def test_compute_losses_same_in_eager_graph_and_xla():
    config = tiny_config(decoder_dropout=0.2)
    config = _with_train(config, word_dropout=0.2)
    model, _, _ = build_training(config, 10, 12, 100)
    ids = doctor.example_batch(12, 10)
    step = tf.constant(3, tf.int64)

    def loss(ids, step):
        return compute_losses(model, ids, step, config.train, 100)["loss"]

    eager = float(loss(ids, step))
    assert float(tf.function(loss)(ids, step)) == pytest.approx(eager, abs=1e-6)
    assert float(tf.function(loss, jit_compile=True)(ids, step)) == pytest.approx(eager, abs=1e-5)
    assert float(loss(ids, tf.constant(4, tf.int64))) != eager  # the step seeds the noise


def test_prepare_data_from_list(smiles):
    prepared = prepare_data(tiny_config().data, smiles)
    assert prepared.ids.shape[0] == len(smiles)
    assert prepared.vocab.tokens[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert (prepared.lengths == (prepared.ids != 0).sum(1)).all()
    assert len(prepared.train_index) + len(prepared.val_index) == len(smiles)


def test_train_writes_a_self_describing_run(tmp_path, smiles):
    run_dir = str(tmp_path / "run")
    summary = train(_with_train(tiny_config(), max_steps=6, epochs=5), run_dir, smiles)
    assert summary["steps"] == 6 and summary["stop_reason"] == "max_steps"
    for name in ("run.json", "config.json", "vocab.json", "metrics.jsonl", "checkpoints/checkpoint"):
        assert os.path.exists(os.path.join(run_dir, name)), name
    assert glob.glob(os.path.join(run_dir, "tensorboard", "events.out.tfevents.*"))
    steps = [r["step"] for r in read_jsonl(os.path.join(run_dir, "metrics.jsonl")) if r["kind"] == "step"]
    assert steps == [2, 4, 6]
    run = load_run(run_dir)
    assert run.config == _with_train(tiny_config(), max_steps=6, epochs=5)
    with pytest.raises(SeqvaeError, match="already holds a run"):
        train(tiny_config(), run_dir, smiles)


def test_epoch_end_runs_validation(tmp_path, smiles):
    run_dir = str(tmp_path / "run")
    summary = train(_with_train(tiny_config(), epochs=2), run_dir, smiles)
    assert summary["epochs"] == 2
    epochs = [r for r in read_jsonl(os.path.join(run_dir, "metrics.jsonl")) if r["kind"] == "epoch"]
    assert [r["epoch"] for r in epochs] == [0, 1]
    assert all(np.isfinite(r["val_loss"]) and np.isfinite(r["train_loss"]) for r in epochs)


def _weights(run_dir):
    return [v.numpy() for v in load_run(run_dir).model.weights]


def test_resume_from_a_mid_epoch_checkpoint_is_exact(tmp_path, smiles):
    config = _with_train(tiny_config(decoder_dropout=0.1), epochs=3, checkpoint_every=3,
                         word_dropout=0.1)
    straight, broken = str(tmp_path / "straight"), str(tmp_path / "broken")
    train(config, straight, smiles)
    # "Crash" after step 7: only the checkpoint of step 6 survives (mid-epoch: 5 steps per epoch).
    train(_with_train(config, max_steps=7), broken, smiles)
    for path in glob.glob(os.path.join(broken, "checkpoints", "ckpt-7*")):
        os.remove(path)
    with open(os.path.join(broken, "checkpoints", "checkpoint"), "w") as out:
        out.write('model_checkpoint_path: "ckpt-6"\nall_model_checkpoint_paths: "ckpt-6"\n')
    summary = train(config, broken, smiles, resume=True)
    assert summary["steps"] == 15
    for a, b in zip(_weights(straight), _weights(broken)):
        np.testing.assert_array_equal(a, b)
    steps = [r["step"] for r in read_jsonl(os.path.join(broken, "metrics.jsonl")) if r["kind"] == "step"]
    assert steps == sorted(set(steps))  # the redone steps were not logged twice


@pytest.mark.slow
def test_sigkill_after_first_checkpoint_then_resume_matches_uninterrupted(tmp_path):
    data = tmp_path / "data.smi"
    data.write_text("\n".join(SMILES * 50) + "\n")
    common = [sys.executable, "-m", "seqvae", "train", str(data), "--max-steps", "40",
              "--set", "model.encoder_units=64", "--set", "model.decoder_units=128",
              "--set", "model.latent_dim=16", "--set", "train.batch_size=64",
              "--set", "train.checkpoint_every=5", "--set", "train.log_every=5"]
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    subprocess.run(common + ["--out", str(straight)], check=True, capture_output=True)
    process = subprocess.Popen(common + ["--out", str(killed)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    index = killed / "checkpoints" / "checkpoint"
    deadline = time.monotonic() + 120
    while not index.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    killed_at = tf.train.latest_checkpoint(str(killed / "checkpoints"))
    assert killed_at is not None and not killed_at.endswith("-40")
    done = subprocess.run([sys.executable, "-m", "seqvae", "train", "--out", str(killed), "--resume"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "trained 40 steps" in done.stdout
    for a, b in zip(_weights(str(straight)), _weights(str(killed))):
        np.testing.assert_array_equal(a, b)


def test_second_process_on_the_same_run_dir_is_refused(tmp_path, smiles):
    from seqvae.training.rundir import RunLock

    run_dir = str(tmp_path / "run")
    os.makedirs(run_dir)
    with RunLock(run_dir):
        with pytest.raises(SeqvaeError, match="another seqvae process"):
            train(tiny_config(), run_dir, smiles)


def test_run_json_records_the_data(tmp_path, smiles):
    run_dir = str(tmp_path / "run")
    train(_with_train(tiny_config(), max_steps=1), run_dir, smiles)
    info = json.load(open(os.path.join(run_dir, "run.json")))
    assert info["tokenizer"] == "smiles" and info["vocab_size"] > 4 and info["data_source"] == "list"


def test_load_run_restores_every_trained_weight(tmp_path, smiles):
    """The optimizer holds the trained variables too: each must equal the loaded model's."""
    config = _with_train(tiny_config(encoder_bidirectional=True, encoder_layers=2), max_steps=3,
                         epochs=2)
    run_dir = str(tmp_path / "run")
    train(config, run_dir, smiles)
    run = load_run(run_dir)
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints")))
    for i, variable in enumerate(run.model.trainable_variables):
        saved = reader.get_tensor(f"optimizer/_trainable_variables/{i}/.ATTRIBUTES/VARIABLE_VALUE")
        np.testing.assert_array_equal(variable.numpy(), saved, err_msg=variable.path)
    again = load_run(run_dir)
    ids = doctor.example_batch(len(run.vocab), run.max_len)
    a = run.model(ids, training=False, seed=tf.constant([1, 1]))["logits"]
    b = again.model(ids, training=False, seed=tf.constant([1, 1]))["logits"]
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("reduction", ["per_token", "per_molecule"])
def test_kl_reduction_fixes_beta_per_molecule_whatever_the_length(reduction):
    """per_molecule: loss = summed recon per molecule + kl_weight * KL, on short and long
    molecules alike; per_token (MOSES): recon per token + kl_weight * KL."""
    config = _with_train(tiny_config(), kl_schedule="constant", kl_weight_end=0.3,
                         kl_reduction=reduction)
    model, _, _ = build_training(config, 12, 12, 100)
    short = np.array([[5, 6, 2] + [0] * 9, [7, 2] + [0] * 10], np.int32)
    long = np.array([[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 6, 2]] * 2, np.int32)
    for ids in (short, long):
        out = compute_losses(model, tf.constant(ids), tf.constant(0, tf.int64), config.train, 100)
        tokens, rows = (ids != 0).sum(), len(ids)
        recon = float(out["recon"]) * tokens / rows if reduction == "per_molecule" else float(
            out["recon"])
        assert float(out["loss"]) == pytest.approx(recon + 0.3 * float(out["kl"]), rel=1e-5)


def test_replan_fits_the_rest_of_the_budget():
    from seqvae.training.loop import _replan

    config = tiny_config().train
    config = dataclasses.replace(config, time_budget=20.0)
    assert _replan(config, 100, 100, 10.0, 10_000) == 200  # 10 s left at 10 steps/s
    assert _replan(config, 100, 100, 10.0, 150) == 150  # never past the epochs/max_steps plan
    assert _replan(config, 10, 10, 1.0, 10_000) == 10_000  # still warming up: keep the plan
    assert _replan(config, 300, 100, 25.0, 10_000) == 301  # over budget: ends now


def test_patience_stops_a_run_that_no_longer_improves(tmp_path, smiles, capsys):
    config = _with_train(tiny_config(), epochs=50, patience=2, learning_rate=1e-12,
                         lr_schedule="constant", kl_schedule="constant")
    summary = train(config, str(tmp_path / "run"), smiles)
    assert summary["stop_reason"] == "plateau" and summary["epochs"] == 3
    epochs = [r for r in read_jsonl(str(tmp_path / "run" / "metrics.jsonl")) if r["kind"] == "epoch"]
    assert len(epochs) == 3 and all("val_loss" in r for r in epochs)
    err = capsys.readouterr().err
    assert "seqvae: training on" in err and "stops after 2 validations without improvement" in err


def test_grammar_softmax_trains_and_only_lowers_the_loss(tmp_path, smiles):
    from seqvae.model.grammar import SmilesGrammar

    config = _with_train(tiny_config(), grammar_softmax=True, max_steps=4, epochs=5)
    prepared = prepare_data(config.data, smiles)
    grammar = SmilesGrammar.from_tokens(prepared.vocab.tokens)
    model, _, _ = build_training(config, prepared.max_len, len(prepared.vocab), 100)
    ids = tf.constant(prepared.ids[:8])
    step = tf.constant(1, tf.int64)

    def losses(grammar):
        return compute_losses(model, ids, step, config.train, 100, grammar=grammar,
                              max_len=prepared.max_len)

    with tf.GradientTape() as tape:
        masked = losses(grammar)["recon"]
    gradients = [tf.convert_to_tensor(g)
                 for g in tape.gradient(masked, model.trainable_variables)]
    assert all(g is not None and np.isfinite(g.numpy()).all() and np.any(g.numpy() != 0)
               for g in gradients)
    # A softmax over fewer tokens gives every target more probability.
    assert 0 < float(masked) < float(losses(None)["recon"])
    compiled = tf.function(lambda: losses(grammar)["recon"])
    assert float(compiled()) == pytest.approx(float(masked), abs=1e-5)
    summary = train(config, str(tmp_path / "run"), smiles)
    assert summary["steps"] == 4 and np.isfinite(summary["last"]["loss"])
    run = load_run(str(tmp_path / "run"))
    from seqvae import inference

    # Its distribution is the masked one: decoding keeps the mask even when asked without it.
    assert inference.sample(run, 5, grammar=False) == inference.sample(run, 5, grammar=True)
