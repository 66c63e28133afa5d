"""Training loop tests: graph/eager agreement, stop conditions, faults (non-finite steps, full
disk, read-only run directory), run files. Resuming: test_resume.py."""

import dataclasses
import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import run_weights, tiny_config, with_train

from seqvae.data.preparation import prepare_data
from seqvae.errors import SeqvaeError
from seqvae.files import read_jsonl
from seqvae.training import doctor
from seqvae.training.loop import train
from seqvae.training.steps import build_training
from seqvae.training.objective import compute_losses
from seqvae.model.vae import SequenceVAE
from seqvae.run import load_run


def test_compute_losses_same_in_eager_graph_and_xla():
    config = tiny_config(decoder_dropout=0.2)
    config = with_train(config, word_dropout=0.2)
    model, _, _ = build_training(config, 10, 12, 100)
    ids = doctor.example_batch(12, 10)
    step = tf.constant(3, tf.int64)

    def loss(ids, step):
        return compute_losses(model, ids, step, config.train, 100)["loss"]

    eager = float(loss(ids, step))
    assert float(tf.function(loss)(ids, step)) == pytest.approx(eager, abs=1e-6)
    assert float(tf.function(loss, jit_compile=True)(ids, step)) == pytest.approx(eager, abs=1e-5)
    assert float(loss(ids, tf.constant(4, tf.int64))) != eager  # the step seeds the noise


def test_scheduled_sampling_gives_every_weight_a_gradient_in_every_execution():
    """Two decoder passes on one z; only the second (on partly drawn inputs) is differentiated:
    every weight still gets a real gradient, and eager, tf.function and XLA agree."""
    config = with_train(tiny_config(decoder_dropout=0.2), scheduled_sampling=0.5, word_dropout=0.1)
    ids = doctor.example_batch(12, 10, batch_size=8)
    reports = doctor.check_gradients(config, ids, 12)
    assert [r.execution for r in reports] == ["eager", "tf.function", "xla"]
    assert all(r.ok for r in reports), doctor.format_reports(reports)
    model, _, _ = build_training(config, 10, 12, 100)
    plain = dataclasses.replace(config.train, scheduled_sampling=0.0)
    step = tf.constant(60, tf.int64)
    drawn = float(compute_losses(model, ids, step, config.train, 100)["loss"])
    assert drawn != float(compute_losses(model, ids, step, plain, 100)["loss"])
    # step 0: the rate is 0, so the second pass reads the true inputs: the same loss as without
    start = tf.constant(0, tf.int64)
    assert float(compute_losses(model, ids, start, config.train, 100)["loss"]) == pytest.approx(
        float(compute_losses(model, ids, start, plain, 100)["loss"]), abs=1e-6)


def test_prepare_data_from_list(smiles):
    prepared = prepare_data(tiny_config().data, smiles)
    assert prepared.ids.shape[0] == len(smiles)
    assert prepared.vocab.tokens[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert (prepared.lengths == (prepared.ids != 0).sum(1)).all()
    assert len(prepared.train_index) + len(prepared.val_index) == len(smiles)


def test_train_writes_a_self_describing_run(tmp_path, smiles):
    run_dir = str(tmp_path / "run")
    summary = train(with_train(tiny_config(), max_steps=6, epochs=5), run_dir, smiles)
    assert summary["steps"] == 6 and summary["stop_reason"] == "max_steps"
    for name in ("run.json", "config.json", "vocab.json", "metrics.jsonl", "checkpoints/checkpoint"):
        assert os.path.exists(os.path.join(run_dir, name)), name
    assert glob.glob(os.path.join(run_dir, "tensorboard", "events.out.tfevents.*"))
    steps = [r["step"] for r in read_jsonl(os.path.join(run_dir, "metrics.jsonl")) if r["kind"] == "step"]
    assert steps == [2, 4, 6]
    run = load_run(run_dir)
    assert run.config == with_train(tiny_config(), max_steps=6, epochs=5)
    with pytest.raises(SeqvaeError, match="already holds a run"):
        train(tiny_config(), run_dir, smiles)


def test_epoch_end_runs_validation(tmp_path, smiles):
    run_dir = str(tmp_path / "run")
    summary = train(with_train(tiny_config(), epochs=2), run_dir, smiles)
    assert summary["epochs"] == 2
    epochs = [r for r in read_jsonl(os.path.join(run_dir, "metrics.jsonl")) if r["kind"] == "epoch"]
    assert [r["epoch"] for r in epochs] == [0, 1]
    assert all(np.isfinite(r["val_loss"]) and np.isfinite(r["train_loss"]) for r in epochs)


def test_second_process_on_the_same_run_dir_is_refused(tmp_path, smiles):
    from seqvae.run import RunLock

    run_dir = str(tmp_path / "run")
    os.makedirs(run_dir)
    with RunLock(run_dir):
        with pytest.raises(SeqvaeError, match="another seqvae process"):
            train(tiny_config(), run_dir, smiles)


def test_run_json_records_the_data(tmp_path, smiles):
    run_dir = str(tmp_path / "run")
    train(with_train(tiny_config(), max_steps=1), run_dir, smiles)
    info = json.load(open(os.path.join(run_dir, "run.json")))
    assert info["tokenizer"] == "smiles" and info["vocab_size"] > 4 and info["data_source"] == "list"


@pytest.mark.slow
def test_load_run_restores_every_trained_weight(tmp_path, smiles):
    """The optimizer holds the trained variables too: each must equal the loaded model's."""
    config = with_train(tiny_config(encoder_bidirectional=True, encoder_layers=2), max_steps=3,
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
    config = with_train(tiny_config(), kl_schedule="constant", kl_weight_end=0.3,
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


@pytest.mark.parametrize("reduction", ["per_token", "per_molecule"])
def test_property_weight_keeps_the_chemical_vae_balance_in_both_conventions(reduction):
    """The property head's MSE is weighted against the mean cross-entropy per token, as the
    chemical VAE weighs it: per_molecule (reconstruction summed per molecule) scales the weight
    by the batch's tokens per molecule, so the head's pull on z matches per_token's."""
    config = with_train(tiny_config(), kl_schedule="constant", kl_weight_end=0.3,
                        kl_reduction=reduction, property_weight=0.5)
    model, _, _ = build_training(config, 12, 12, 100, num_properties=2)
    targets = tf.constant([[0.5, -1.0], [1.5, 0.2]], tf.float32)
    for ids in (np.array([[5, 6, 2] + [0] * 9, [7, 2] + [0] * 10], np.int32),
                np.array([[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 6, 2]] * 2, np.int32)):
        out = compute_losses(model, tf.constant(ids), tf.constant(0, tf.int64), config.train, 100,
                             targets=targets)
        tokens_per_molecule = (ids != 0).sum() / len(ids)
        recon, weight = (float(out["recon"]), 0.5) if reduction == "per_token" else (
            float(out["recon"]) * tokens_per_molecule, 0.5 * tokens_per_molecule)
        assert float(out["property"]) > 0
        assert float(out["loss"]) == pytest.approx(
            recon + 0.3 * float(out["kl"]) + weight * float(out["property"]), rel=1e-5)


def test_replan_fits_the_rest_of_the_budget():
    from seqvae.training.hooks import replan as _replan

    config = tiny_config().train
    config = dataclasses.replace(config, time_budget=20.0)
    assert _replan(config, 100, 100, 10.0, 10_000) == 200  # 10 s left at 10 steps/s
    assert _replan(config, 100, 100, 10.0, 150) == 150  # never past the epochs/max_steps plan
    assert _replan(config, 10, 10, 1.0, 10_000) == 10_000  # still warming up: keep the plan
    assert _replan(config, 300, 100, 25.0, 10_000) == 301  # over budget: ends now


def test_patience_stops_a_run_that_no_longer_improves(tmp_path, smiles, capsys):
    config = with_train(tiny_config(), epochs=50, patience=2, learning_rate=1e-12,
                        lr_schedule="constant", kl_schedule="constant")
    summary = train(config, str(tmp_path / "run"), smiles)
    assert summary["stop_reason"] == "plateau" and summary["epochs"] == 3
    epochs = [r for r in read_jsonl(str(tmp_path / "run" / "metrics.jsonl")) if r["kind"] == "epoch"]
    assert len(epochs) == 3 and all("val_loss" in r for r in epochs)
    err = capsys.readouterr().err
    assert "seqvae: training on" in err and "stops after 2 validations without improvement" in err


def test_restore_best_ends_with_the_weights_of_the_best_validation(tmp_path, smiles):
    # a learning rate so high that the held-out loss jumps about: the last pass is not the best
    config = with_train(tiny_config(), epochs=0, max_steps=30, validate_every=3,
                        restore_best=True, learning_rate=0.5, lr_schedule="constant",
                        kl_schedule="constant")
    run_dir = str(tmp_path / "run")
    summary = train(config, run_dir, smiles)
    records = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    losses = {r["step"]: r["val_loss"] for r in records if r["kind"] == "validation"}
    best = min(losses, key=losses.get)
    assert summary["weights_of_step"] == best and records[-1]["weights_of_step"] == best
    assert best < max(losses)  # the last passes were worse: there is something to restore
    final = load_run(run_dir)
    kept = SequenceVAE(config.model, len(final.vocab), final.max_len).build_weights()
    tf.train.Checkpoint(model=kept).restore(
        os.path.join(run_dir, "best", f"ckpt-{best}")).expect_partial()
    for a, b in zip(kept.weights, final.model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # without restore_best the run ends with the last step's weights
    plain = train(with_train(config, restore_best=False), str(tmp_path / "plain"), smiles)
    assert plain["weights_of_step"] is None


@pytest.mark.slow
def test_grammar_softmax_trains_and_only_lowers_the_loss(tmp_path, smiles):
    from seqvae.model.grammar import SmilesGrammar

    config = with_train(tiny_config(), grammar_softmax=True, max_steps=4, epochs=5)
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


def _strict_records(run_dir):
    """metrics.jsonl parsed as strict JSON (NaN or Infinity would raise)."""
    def refuse(token):
        raise AssertionError(f"non-JSON number {token} in metrics.jsonl")

    with open(os.path.join(run_dir, "metrics.jsonl")) as handle:
        return [json.loads(line, parse_constant=refuse) for line in handle]


def test_a_non_finite_step_changes_no_weight_and_no_optimizer_state():
    from seqvae.training.steps import make_train_step

    config = tiny_config()
    model, optimizer, counters = build_training(config, 10, 12, 100)
    ids = tf.constant(doctor.example_batch(12, 10))
    poisoned = tf.where(ids > 5, ids, 0)  # a finite batch, then NaN weights poison the loss
    state = lambda: [v.numpy().copy() for v in model.weights + optimizer.variables]  # noqa: E731
    step = make_train_step(model, optimizer, config.train, 100, counters)
    assert float(step(ids)["finite"]) == 1.0
    before = state()
    embedding = model.trainable_variables[0]
    saved = embedding.numpy()
    embedding.assign(np.full_like(saved, np.nan))
    out = step(poisoned)
    embedding.assign(saved)
    assert float(out["finite"]) == 0.0 and not np.isfinite(float(out["loss"]))
    for a, b in zip(before, state()):
        np.testing.assert_array_equal(a, b)
    assert int(counters["step"].numpy()) == 2  # the data order moves on


def _nan_at(steps):
    """compute_losses whose loss is NaN at the given 1-based steps (the step being taken)."""
    from seqvae.training import steps as step_lib

    original = step_lib.compute_losses

    def poisoned(model, ids, step, *args, **kwargs):
        out = dict(original(model, ids, step, *args, **kwargs))
        bad = tf.reduce_any(tf.equal(step + 1, tf.constant(steps, tf.int64)))
        out["loss"] = tf.where(bad, tf.constant(float("nan")), out["loss"])
        return out

    return poisoned


def test_nan_steps_are_skipped_counted_and_training_goes_on(tmp_path, smiles, monkeypatch):
    from seqvae.training import steps

    monkeypatch.setattr(steps, "compute_losses", _nan_at([3, 4]))
    run_dir = str(tmp_path / "run")
    summary = train(with_train(tiny_config(), max_steps=8, epochs=5), run_dir, smiles)
    assert summary["steps"] == 8 and summary["skipped_nonfinite"] == 2
    records = _strict_records(run_dir)
    assert [(r["step"], r["consecutive"]) for r in records if r["kind"] == "skipped"] == [(3, 1), (4, 2)]
    assert [r["skipped_steps"] for r in records if r["kind"] == "step"] == [0, 2, 2, 2]
    assert all(np.isfinite(w).all() for w in run_weights(run_dir))


def test_consecutive_nan_steps_stop_the_run_at_the_last_good_checkpoint(tmp_path, smiles, monkeypatch):
    from seqvae.training import steps

    monkeypatch.setattr(steps, "compute_losses", _nan_at(list(range(6, 30))))
    run_dir = str(tmp_path / "run")
    config = with_train(tiny_config(), max_steps=20, epochs=5, max_nonfinite_steps=3)
    with pytest.raises(SeqvaeError) as caught:
        train(config, run_dir, smiles)
    message = str(caught.value)
    assert "\n" not in message and "3 consecutive steps up to step 8" in message
    # ckpt-5: the end of the first epoch (5 steps), the last before the NaN steps 6, 7, 8
    assert os.path.join(run_dir, "checkpoints", "ckpt-5") + " is intact" in message
    assert tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints")).endswith("ckpt-5")
    assert all(np.isfinite(w).all() for w in run_weights(run_dir))  # loadable, finite


def test_learning_rate_1e9_never_writes_nan(tmp_path, smiles):
    run_dir = str(tmp_path / "run")
    config = with_train(tiny_config(), max_steps=30, epochs=50, learning_rate=1e9,
                        checkpoint_every=1, max_nonfinite_steps=4)
    with pytest.raises(SeqvaeError, match=r"training diverged: 4 consecutive steps up to step \d+"):
        train(config, run_dir, smiles)
    skipped = [r for r in _strict_records(run_dir) if r["kind"] == "skipped"]
    assert len(skipped) >= 4 and skipped[-1]["consecutive"] == 4
    folder = os.path.join(run_dir, "checkpoints")
    for prefix in glob.glob(os.path.join(folder, "ckpt-*.index")):
        reader = tf.train.load_checkpoint(prefix[:-len(".index")])
        for name in reader.get_variable_to_shape_map():
            value = reader.get_tensor(name)
            if isinstance(value, np.ndarray) and value.dtype.kind == "f":
                assert np.isfinite(value).all(), (prefix, name)


# --- full disk, read-only run directory --------------------------------------------------------


@pytest.mark.slow
def test_a_metrics_write_on_a_full_disk_is_one_line_and_the_run_resumes_exactly(tmp_path, smiles,
                                                                                 monkeypatch):
    import errno

    from seqvae import files

    config = with_train(tiny_config(), max_steps=8, epochs=5, checkpoint_every=4, log_every=2)
    straight = train(config, str(tmp_path / "straight"), smiles)["weights_checksum"]
    append, calls = files.append_jsonl, []

    def full_at_step_6(path, record):  # the disk fills while the log line of step 6 is written
        calls.append(record.get("step"))
        if record.get("step") == 6:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        append(path, record)

    monkeypatch.setattr(files, "append_jsonl", full_at_step_6)
    run_dir = str(tmp_path / "run")
    with pytest.raises(SeqvaeError) as caught:
        train(config, run_dir, smiles)
    message = str(caught.value)
    assert "\n" not in message and 6 in calls
    assert message.startswith(f"{os.path.join(run_dir, 'metrics.jsonl')}: No space left on device")
    # ckpt-5, the end of the first epoch (5 steps): the last one before step 6
    assert tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints")).endswith("ckpt-5")
    monkeypatch.undo()
    summary = train(config, run_dir, smiles, resume=True)  # the disk has room again
    assert summary["steps"] == 8 and summary["weights_checksum"] == straight


def test_a_read_only_run_directory_is_one_line(tmp_path, smiles, monkeypatch):
    """Refused in one line from the first file written (the lock), with the checkpoints intact.
    Simulated (EROFS from the lock's open): the tests may run as root, whom chmod does not stop."""
    import builtins
    import errno

    from seqvae import run as rundir

    config = with_train(tiny_config(), max_steps=4, epochs=5)
    run_dir = str(tmp_path / "run")
    before = train(config, run_dir, smiles)["weights_checksum"]

    def read_only(path, *args, **kwargs):
        if str(path).startswith(run_dir) and args and args[0][0] in "wa+":
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(rundir, "open", read_only, raising=False)
    longer = with_train(config, max_steps=8)
    with pytest.raises(SeqvaeError, match=r"/run/\.lock: Read-only file system; the checkpoints"):
        train(longer, run_dir, smiles, resume=True)
    monkeypatch.undo()
    assert load_run(run_dir) and train(config, run_dir, smiles, resume=True)[
        "weights_checksum"] == before
