"""Each hook of the training loop on its own: divergence, logging, the time budget, validation
and early stopping, checkpoints, signals and the step limit (the loop's own tests train with all
of them)."""

import dataclasses
import os
import signal

import pytest
import tensorflow as tf
from conftest import tiny_config

from seqvae.files import read_jsonl
from seqvae.training import hooks


def _config(**train):
    return dataclasses.replace(tiny_config().train, **train)


def _state(step, finite=True, train_time=1.0, epoch=0, **values):
    values = {"loss": 1.0, "recon": 0.5, "kl": 2.0, "kl_weight": 0.1, "learning_rate": 1e-3,
              **values}
    return hooks.StepState(step, epoch, values, finite, train_time, seen=8 * step, steps_here=step)


def test_the_most_urgent_reason_wins():
    assert hooks.most_urgent(["", "time_budget", "plateau"]) == "plateau"
    assert hooks.most_urgent(["max_steps", "diverged", "interrupted"]) == "diverged"
    assert hooks.most_urgent(["", ""]) == ""


def test_divergence_logs_each_skipped_step_and_stops_after_a_streak(tmp_path):
    path = str(tmp_path / "metrics.jsonl")
    divergence = hooks.Divergence(_config(max_nonfinite_steps=3), path, chief=True, skipped=5)
    assert divergence.after_step(_state(1, finite=False, loss=float("nan"))) == ""
    assert divergence.after_step(_state(2)) == ""  # a finite step ends the streak
    assert [divergence.after_step(_state(s, finite=False)) for s in (3, 4, 5)] == [
        "", "", "diverged"]
    lines = read_jsonl(path)
    assert [r["consecutive"] for r in lines] == [1, 1, 2, 3]
    assert lines[0]["loss"] == "nan" and divergence.skipped == 9  # counted over resumes


def test_metrics_log_writes_every_log_every_steps_and_keeps_the_epochs_means(tmp_path):
    path = str(tmp_path / "metrics.jsonl")
    writer = tf.summary.create_file_writer(str(tmp_path / "tb"))
    divergence = hooks.Divergence(_config(), path, chief=True)
    log = hooks.MetricsLog(_config(log_every=2), path, writer, divergence,
                           hooks.Progress(10, 2), with_property=False)
    log.before_epoch(0)
    for step, loss in ((1, 1.0), (2, 3.0), (3, 100.0)):
        log.after_step(_state(step, finite=step != 3, loss=loss))
    assert [(r["kind"], r["step"], r["loss"]) for r in read_jsonl(path)] == [("step", 2, 3.0)]
    assert log.epoch_means()["train_loss"] == 2.0  # the skipped step is not averaged
    log.before_epoch(1)
    assert log.epoch_means()["train_loss"] == 0.0


def test_time_budget_replans_the_schedules_and_stops_when_spent():
    planned = tf.Variable(10_000, dtype=tf.int64)
    budget = hooks.TimeBudget(_config(time_budget=10.0, log_every=50), planned, 10_000, None)
    assert budget.after_step(_state(49, train_time=4.9)) == "" and int(planned.numpy()) == 10_000
    assert budget.after_step(_state(50, train_time=5.0)) == ""
    assert int(planned.numpy()) == 100  # 5 s left at 10 steps/s
    assert budget.after_step(_state(51, train_time=10.0)) == "time_budget"
    assert hooks.TimeBudget(_config(), planned, 10, None).after_step(_state(1, train_time=1e9)) == ""


def test_validation_counts_patience_in_the_checkpointed_counters(tmp_path):
    path = str(tmp_path / "metrics.jsonl")
    losses = iter([3.0, 2.0, 2.5, 2.4])
    counters = {"best_val": tf.Variable(float("inf"), dtype=tf.float64),
                "bad_validations": tf.Variable(0, dtype=tf.int64)}
    log = hooks.MetricsLog(_config(), path, tf.summary.create_file_writer(str(tmp_path)),
                           hooks.Divergence(_config(), path, True), hooks.Progress(10, 1), False)
    validation = hooks.Validation(_config(patience=2, validate_every=5), lambda: [tf.ones([2, 3], tf.int32)],
                                  lambda ids, step: {"loss": next(losses), "recon": 1.0, "kl": 1.0},
                                  counters, log)
    assert [validation.after_step(_state(s)) for s in (4, 5, 10, 15, 20)] == [
        "", "", "", "", "plateau"]
    assert float(counters["best_val"].numpy()) == 2.0
    assert [r["val_loss"] for r in read_jsonl(path)] == [3.0, 2.0, 2.5, 2.4]
    assert validation.after_epoch(0, 20) == ""  # validate_every set: none at the epoch's end


def test_checkpointing_saves_on_schedule_but_not_inside_a_skipped_streak(tmp_path):
    saved = []

    class Saving(hooks.Checkpointing):
        def save(self, step):
            saved.append(step)
            self.saved_step = step

    divergence = hooks.Divergence(_config(), str(tmp_path / "m.jsonl"), chief=False)
    saving = Saving(_config(checkpoint_every=4), None, None, divergence, saved_step=-1)
    for step in range(1, 9):
        divergence.after_step(_state(step, finite=step != 8))
        saving.after_step(_state(step, finite=step != 8))
    saving.after_epoch(0, 8)
    assert saved == [4] and saving.saved_step == 4  # step 8 ended a skipped streak
    divergence.after_step(_state(9))
    saving.after_epoch(0, 9)
    assert saved == [4, 9]


def test_signals_stop_the_run_and_give_the_handlers_back():
    before = signal.getsignal(signal.SIGTERM)
    watcher = hooks.Signals()
    assert watcher.after_step(_state(1)) == ""
    os.kill(os.getpid(), signal.SIGTERM)
    assert watcher.after_step(_state(2)) == "interrupted"
    watcher.close()
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("max_steps, step, reason", [(0, 10**9, ""), (5, 4, ""), (5, 5, "max_steps")])
def test_step_limit(max_steps, step, reason):
    assert hooks.StepLimit(_config(max_steps=max_steps)).after_step(_state(step)) == reason
