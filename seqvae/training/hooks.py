"""What happens around each training step, one small unit each (Keras's callbacks): divergence,
logging (``metrics.jsonl``, TensorBoard, progress), the time budget, validation and early
stopping, checkpoints, signals and the step limit.

The loop (``seqvae.training.loop``) calls every hook in order after each step and at each epoch's
end; a hook that wants the run to stop returns its reason, and the loop stops with the most
urgent (``STOP_PRIORITY``).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

from seqvae import checkpoints as checkpoints_lib
from seqvae import files
from seqvae.config import TrainConfig
from seqvae.messages import note

# Stop reasons, most urgent first: a diverged run stops whatever else holds.
STOP_PRIORITY = ("diverged", "plateau", "interrupted", "max_steps", "time_budget")


@dataclass
class StepState:
    """What one step did: its counters, metrics and the run's time so far."""

    step: int  # optimizer steps done, this one included
    epoch: int  # the epoch it belongs to (0-based)
    values: dict  # the step's metrics (loss, recon, kl, kl_weight, learning_rate, grad_norm, ...)
    finite: bool  # its loss and gradient were finite (else the step was skipped)
    train_time: float  # seconds spent in training steps by this process
    seen: int  # sequences trained on by this process
    steps_here: int  # steps done by this process (this one included)

    @property
    def rate(self) -> float:
        """Sequences per second of training so far."""
        return self.seen / max(self.train_time, 1e-9)


class Hook:
    """Called around each step; ``after_step`` and ``after_epoch`` return a stop reason or ''."""

    def before_epoch(self, epoch: int) -> None:
        pass

    def after_step(self, state: StepState) -> str:
        return ""

    def after_epoch(self, epoch: int, step: int) -> str:
        return ""

    def close(self) -> None:
        pass


def most_urgent(reasons) -> str:
    """The first of ``STOP_PRIORITY`` among ``reasons`` ('' when none)."""
    given = set(reasons)
    return next((reason for reason in STOP_PRIORITY if reason in given), "")


class Divergence(Hook):
    """Counts steps with a non-finite loss or gradient (each skipped by the step itself), logs
    each, and stops the run after ``max_nonfinite_steps`` in a row."""

    def __init__(self, config: TrainConfig, metrics_path: str, chief: bool, skipped: int = 0):
        self.limit, self.metrics_path, self.chief = config.max_nonfinite_steps, metrics_path, chief
        self.streak, self.skipped = 0, skipped  # skipped: over the whole run, resumes included

    def after_step(self, state: StepState) -> str:
        if state.finite:
            self.streak = 0
            return ""
        self.streak, self.skipped = self.streak + 1, self.skipped + 1
        if self.chief:
            files.append_jsonl(self.metrics_path, {
                "kind": "skipped", "step": state.step, "epoch": state.epoch,
                "consecutive": self.streak, "skipped_steps": self.skipped,
                **json_safe(state.values)})
        return "diverged" if self.streak >= self.limit else ""


class Progress:
    """Progress on stderr: ``keras.utils.Progbar`` on a terminal, one line per log step in logs."""

    NAMES = ("loss", "recon", "kl", "kl_weight", "learning_rate")

    def __init__(self, total_steps: int, every: int):
        self.every, self.total = every, total_steps
        self.bar = keras.utils.Progbar(total_steps, stateful_metrics=self.NAMES + ("seq/s",),
                                       unit_name="step") if sys.stderr.isatty() else None

    def replan(self, planned: int) -> None:
        """The run's length in steps as now planned (a time budget re-plans it)."""
        self.total = planned
        if self.bar is not None:
            self.bar.target = planned

    def update(self, step: int, epoch: int, values: dict, rate: float) -> None:
        """``rate``: sequences per second of training so far."""
        shown = [(name, values[name]) for name in self.NAMES] + [("seq/s", rate)]
        if self.bar is not None:
            with contextlib.redirect_stdout(sys.stderr):  # Progbar writes to stdout
                self.bar.update(step, shown)
        elif step % self.every == 0:
            note(f"step {step}/{self.total} epoch {epoch + 1} "
                  + " ".join(f"{name} {value:.4g}" for name, value in shown))

    def close(self) -> None:
        if self.bar is not None:
            print(file=sys.stderr)


class MetricsLog(Hook):
    """The epoch's running means (``trackers``), the progress line, and every ``log_every`` steps
    a ``metrics.jsonl`` record and its TensorBoard scalars (the chief only)."""

    def __init__(self, config: TrainConfig, metrics_path: str, writer, divergence: Divergence,
                 progress: Progress | None, with_property: bool):
        self.every, self.metrics_path, self.writer = config.log_every, metrics_path, writer
        self.divergence, self.progress = divergence, progress
        self.trackers = {name: keras.metrics.Mean(name=name) for name in
                         ("loss", "recon", "kl", "kl_weight") + (("property",) if with_property
                                                                 else ())}

    def before_epoch(self, epoch: int) -> None:
        for tracker in self.trackers.values():
            tracker.reset_state()

    def after_step(self, state: StepState) -> str:
        if state.finite:
            for name, tracker in self.trackers.items():
                tracker.update_state(state.values[name])
        if self.progress is None:  # not the chief
            return ""
        self.progress.update(state.step, state.epoch, state.values, state.rate)
        if state.step % self.every == 0:
            files.append_jsonl(self.metrics_path, {
                "kind": "step", "step": state.step, "epoch": state.epoch,
                "seq_per_s": state.rate, "train_s": round(state.train_time, 2),
                "skipped_steps": self.divergence.skipped, **json_safe(state.values)})
            with self.writer.as_default(step=state.step):
                for key, value in state.values.items():
                    tf.summary.scalar(f"train/{key}", value)
        return ""

    def epoch_means(self) -> dict:
        """``train_loss``, ``train_recon``, ...: the means over the epoch's finite steps."""
        return {f"train_{k}": float(t.result()) for k, t in self.trackers.items()}

    def record(self, record: dict) -> None:
        """One ``metrics.jsonl`` line of another kind (validation, epoch) and its scalars."""
        if self.progress is None:
            return
        files.append_jsonl(self.metrics_path, json_safe(record))
        with self.writer.as_default(step=record["step"]):
            for key, value in record.items():
                if key.startswith(("train_", "val_")):
                    tf.summary.scalar(f"{record['kind']}/{key}", value)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()


class TimeBudget(Hook):
    """``train.time_budget``: every ``log_every`` steps re-plans the run's length (``planned``, which
    the learning-rate and KL schedules read) to what the rest of the budget allows at the
    measured rate, and stops the run when the budget is spent."""

    def __init__(self, config: TrainConfig, planned: tf.Variable, total_steps: int,
                 progress: Progress | None):
        self.config, self.planned, self.total, self.progress = (config, planned, total_steps,
                                                                progress)

    def after_step(self, state: StepState) -> str:
        budget = self.config.time_budget
        if not budget:
            return ""
        if state.step % self.config.log_every == 0:
            self.planned.assign(replan(self.config, state.step, state.steps_here,
                                       state.train_time, self.total))
            if self.progress is not None:
                self.progress.replan(int(self.planned.numpy()))
        return "time_budget" if state.train_time >= budget else ""


def replan(config: TrainConfig, step: int, steps_here: int, train_time: float,
           total_steps: int) -> int:
    """The run's length in steps when time bounds it: the steps done plus what the rest of the
    budget allows at this process's measured rate (after 20 warm-up steps; at most the epochs
    or max_steps plan), so the LR and KL schedules end where the budget ends."""
    if steps_here < 20 or train_time <= 0:
        return total_steps
    remaining = max(config.time_budget - train_time, 0.0) * steps_here / train_time
    return max(step + 1, min(total_steps, step + int(remaining)))


class Validation(Hook):
    """A validation pass every ``validate_every`` steps (else at each epoch's end), its record,
    and early stopping: ``plateau`` after ``patience`` passes without a better loss (the best
    and the count live in the checkpointed ``counters``, so a resumed run keeps counting)."""

    def __init__(self, config: TrainConfig, validation_batches, eval_step, counters: dict,
                 log: MetricsLog, best: "BestWeights | None" = None):
        self.config, self.batches, self.eval_step = config, validation_batches, eval_step
        self.counters, self.log, self.best = counters, log, best

    def after_step(self, state: StepState) -> str:
        every = self.config.validate_every
        if every and state.step % every == 0:
            return self._validate(state.epoch, state.step, "validation")
        return ""

    def after_epoch(self, epoch: int, step: int) -> str:
        return "" if self.config.validate_every else self._validate(epoch, step, "epoch")

    def _validate(self, epoch: int, step: int, kind: str) -> str:
        record = {"kind": kind, "epoch": epoch, "step": step,
                  **validation_losses(self.batches(), self.eval_step)}
        if kind == "epoch":
            record.update(self.log.epoch_means())
        self.log.record(record)
        if not (self.config.patience or self.best) or "val_loss" not in record:
            return ""
        if record["val_loss"] < float(self.counters["best_val"].numpy()):
            self.counters["best_val"].assign(record["val_loss"])
            self.counters["bad_validations"].assign(0)
            if self.best is not None:
                self.best.keep(step)
        else:
            self.counters["bad_validations"].assign_add(1)
        return "plateau" if self.config.patience and int(
            self.counters["bad_validations"].numpy()) >= self.config.patience else ""


class BestWeights:
    """``train.restore_best``: the weights of the best validation pass so far, kept in
    ``RUN_DIR/best/`` (a checkpoint of the model alone, so a resumed run still has them), and
    put back in the model when training ends."""

    DIRECTORY = "best"

    def __init__(self, run_dir: str, model):
        import os

        self.model = model
        self.manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model),
                                                  os.path.join(run_dir, self.DIRECTORY), 1)

    def keep(self, step: int) -> None:
        checkpoints_lib.save(self.manager, step, self.model.weights)

    def restore(self) -> int | None:
        """Puts the kept weights back; the step they are of (None: none kept)."""
        latest = self.manager.latest_checkpoint
        if latest is None:
            return None
        tf.train.Checkpoint(model=self.model).restore(latest).expect_partial()
        return checkpoints_lib.checkpoint_step(latest)


def validation_losses(validation_batches, eval_step) -> dict:
    """Mean loss, recon and KL over the validation batches (fixed seeds: comparable passes)."""
    sums, count = {}, 0
    for i, batch in enumerate(validation_batches):
        ids, targets = batch if isinstance(batch, tuple) else (batch, None)
        extra = () if targets is None else (targets,)
        out = eval_step(ids, tf.constant(10**9 + i, tf.int64), *extra)
        for key in ("loss", "recon", "kl", "property"):
            if key in out:
                sums[key] = sums.get(key, 0.0) + float(out[key]) * int(ids.shape[0])
        count += int(ids.shape[0])
    return {f"val_{k}": v / count for k, v in sums.items()} if count else {}


class Checkpointing(Hook):
    """A checkpoint every ``checkpoint_every`` steps and at each epoch's end, unless the last
    steps were skipped (the weights are those of the last checkpoint then); ``saved_step`` is
    the newest. Every worker saves (a collective save)."""

    def __init__(self, config: TrainConfig, manager, model, divergence: Divergence,
                 saved_step: int):
        self.every, self.manager, self.model = config.checkpoint_every, manager, model
        self.divergence, self.saved_step = divergence, saved_step

    def save(self, step: int) -> None:
        checkpoints_lib.save(self.manager, step, self.model.weights)
        self.saved_step = step

    def after_step(self, state: StepState) -> str:
        if state.step % self.every == 0 and not self.divergence.streak:
            self.save(state.step)
        return ""

    def after_epoch(self, epoch: int, step: int) -> str:
        if not self.divergence.streak:
            self.save(step)
        return ""


class Signals(Hook):
    """Ctrl-C and SIGTERM (a scheduler's notice before it preempts the job) end the step, which
    is checkpointed, and stop the run ``interrupted``; the previous handlers come back at the
    end. Only in the main thread (Python delivers signals there)."""

    def __init__(self):
        self.interrupted, self.previous = False, {}
        if threading.current_thread() is threading.main_thread():
            for number in (getattr(signal, name) for name in ("SIGINT", "SIGTERM")
                           if hasattr(signal, name)):
                self.previous[number] = signal.signal(number, self._note)

    def _note(self, *_) -> None:
        self.interrupted = True

    def after_step(self, state: StepState) -> str:
        return "interrupted" if self.interrupted else ""

    def close(self) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)


class StepLimit(Hook):
    """``train.max_steps``: the run stops at that step, counted over resumes."""

    def __init__(self, config: TrainConfig):
        self.max_steps = config.max_steps

    def after_step(self, state: StepState) -> str:
        return "max_steps" if self.max_steps and state.step >= self.max_steps else ""


def json_safe(values: dict) -> dict:
    """Metric values for a JSON line: NaN and infinities (invalid JSON) written as strings."""
    return {k: str(v) if isinstance(v, float) and not np.isfinite(v) else v
            for k, v in values.items()}
