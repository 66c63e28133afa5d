"""Resuming training: exactly after a crash, after SIGKILLs at chosen moments (one, and ten in a
row with the launch command itself), and one command for every start (missing run, killed before
its first checkpoint, finished, time budget used)."""

import contextlib
import glob
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import SMILES, run_weights, tiny_config, with_train

from seqvae.errors import SeqvaeError
from seqvae.files import read_jsonl
from seqvae.training.loop import train


def test_resume_from_a_mid_epoch_checkpoint_is_exact(tmp_path, smiles):
    config = with_train(tiny_config(decoder_dropout=0.1), epochs=3, checkpoint_every=3,
                        word_dropout=0.1)
    straight, broken = str(tmp_path / "straight"), str(tmp_path / "broken")
    train(config, straight, smiles)
    # "Crash" after step 7: only the checkpoint of step 6 survives (mid-epoch: 5 steps per epoch).
    train(with_train(config, max_steps=7), broken, smiles)
    for path in glob.glob(os.path.join(broken, "checkpoints", "ckpt-7*")):
        os.remove(path)
    with open(os.path.join(broken, "checkpoints", "checkpoint"), "w") as out:
        out.write('model_checkpoint_path: "ckpt-6"\nall_model_checkpoint_paths: "ckpt-6"\n')
    summary = train(config, broken, smiles, resume=True)
    assert summary["steps"] == 15
    for a, b in zip(run_weights(straight), run_weights(broken)):
        np.testing.assert_array_equal(a, b)
    steps = [r["step"] for r in read_jsonl(os.path.join(broken, "metrics.jsonl")) if r["kind"] == "step"]
    assert steps == sorted(set(steps))  # the redone steps were not logged twice


@pytest.mark.slow
def test_sigterm_after_first_checkpoint_then_resume_matches_uninterrupted(tmp_path,
                                                                         preempted_reference):
    """SIGTERM (a scheduler's notice before preemption) as soon as the first checkpoint is
    complete: the run ends its step, saves it and stops "interrupted"; the short form ``seqvae
    train --out RUN --resume`` (data and settings from the run directory) finishes it exactly.
    (SIGKILL: the repeated test below.)"""
    data, straight = preempted_reference
    steps = PREEMPTED_STEPS
    common = ["train", str(data), *PREEMPTED, "--out"]
    killed = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, "-m", "seqvae", *common, str(killed)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    index = killed / "checkpoints" / "checkpoint"
    assert _kill_when(process, index.exists, number=signal.SIGTERM), "the run ended before the signal"
    killed_at = tf.train.latest_checkpoint(str(killed / "checkpoints"))
    assert killed_at is not None and not killed_at.endswith(f"-{steps}")
    stopped = re.search(r"trained (\d+) steps \(interrupted\)", process.stdout.read())
    assert process.returncode == 0 and stopped, "SIGTERM did not stop the run cleanly"
    assert killed_at.endswith(f"-{stopped.group(1)}")  # the step it stopped at was saved
    done = subprocess.run([sys.executable, "-m", "seqvae", "train", "--out", str(killed), "--resume"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"trained {steps} steps" in done.stdout
    for a, b in zip(run_weights(str(straight)), run_weights(str(killed))):
        np.testing.assert_array_equal(a, b)


# --- faults: preemption, divergence ------------------------------------------------------------

PREEMPTED_STEPS = 60
PREEMPTED = ["--max-steps", str(PREEMPTED_STEPS), "--set", "model.encoder_units=8",
             "--set", "model.decoder_units=8", "--set", "model.decoder_layers=1",
             "--set", "model.latent_dim=4", "--set", "train.batch_size=4",
             "--set", "train.checkpoint_every=3", "--set", "train.log_every=3",
             "--set", "train.export_at_end=false", "--set", "train.word_dropout=0.1"]


@pytest.fixture(scope="module")
def preempted_reference(tmp_path_factory):
    """The data file of the preemption tests and the uninterrupted run of ``PREEMPTED`` on it
    (the launch command with ``--resume``, which starts a missing run), trained in this process."""
    folder = tmp_path_factory.mktemp("preempted")
    data, straight = folder / "data.smi", folder / "straight"
    data.write_text("\n".join(SMILES * 3) + "\n")
    from seqvae.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["train", str(data), *PREEMPTED, "--resume", "--out", str(straight)]) == 0
    return data, straight


def _kill_when(process, ready, timeout: float = 600, number: int = signal.SIGKILL) -> bool:
    """SIGKILLs ``process`` (a Popen or a ``_Launched``; or sends it signal ``number``) as soon
    as ``ready()`` holds (polled every ms); False when the process ended first. Not seeing the
    moment within ``timeout`` fails the test: a kill at another moment would test something
    else."""
    deadline = time.monotonic() + timeout
    while process.poll() is None and not ready():
        assert time.monotonic() < deadline, "the moment to kill at never came"
        time.sleep(0.001)
    if process.poll() is not None:
        return False
    process.send_signal(number)
    process.wait()
    return True


# A process that has paid for the imports every launch pays (~4 s of CPU, TensorFlow's), then
# forks one child per launch that runs the command line's main(argv) (no TensorFlow op has run
# in it before the fork). Each child is a process of its own, SIGKILLed like any.
_LAUNCHER = """
import json, os, sys
from seqvae.cli import main
import seqvae.training.loop  # noqa: F401
for line in sys.stdin:
    argv, log = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1); os.dup2(out, 2)
        os._exit(main(argv))
    print(pid, flush=True)
    print(os.waitpid(pid, 0)[1], flush=True)
"""


class _Launched:
    """One launch through ``_LAUNCHER``, with Popen's poll/send_signal/wait/returncode."""

    def __init__(self, launcher: subprocess.Popen, argv: list[str], log):
        self.launcher, self.log, self.returncode = launcher, log, None
        launcher.stdin.write(json.dumps([argv, str(log)]) + "\n")
        launcher.stdin.flush()
        self.pid = int(launcher.stdout.readline())

    def poll(self):
        if self.returncode is None:
            try:
                os.kill(self.pid, 0)  # the launcher reaps it at once: gone means ended
            except ProcessLookupError:
                self.wait()
        return self.returncode

    def send_signal(self, number: int) -> None:
        os.kill(self.pid, number)

    def wait(self) -> int:
        if self.returncode is None:
            status = int(self.launcher.stdout.readline())
            self.returncode = (-os.WTERMSIG(status) if os.WIFSIGNALED(status)
                               else os.WEXITSTATUS(status))
        return self.returncode


@pytest.mark.slow
def test_repeated_sigkill_with_the_same_resume_command_matches_uninterrupted(tmp_path,
                                                                             preempted_reference):
    """Seven SIGKILLs at chosen and random moments (during the imports, before the first
    checkpoint, during checkpoint writes, just after them, at random times after the restore),
    each followed by the launch command itself (``--resume`` included): the final weights equal
    an uninterrupted run's bit for bit, and every step is logged once."""
    import random

    started = time.monotonic()
    data, straight = preempted_reference
    killed = tmp_path / "killed"
    command = ["train", str(data), *PREEMPTED, "--resume", "--out"]
    checkpoints, metrics = killed / "checkpoints", killed / "metrics.jsonl"
    index = checkpoints / "checkpoint"

    def temporary() -> dict:  # TensorFlow's files of a checkpoint being written
        if not checkpoints.is_dir():
            return {}
        found = {}
        for path in list(checkpoints.iterdir()):
            if "_temp" in path.name or "tempstate" in path.name:
                with contextlib.suppress(OSError):
                    found[path.name] = path.stat().st_mtime_ns
        return found

    def mtime(path):
        return path.stat().st_mtime_ns if path.exists() else None

    def writing(before: dict):  # a checkpoint write begun since (not one a kill left behind)
        return lambda: any(before.get(name) != stamp for name, stamp in temporary().items())

    def changed(path, delay: float = 0.0):  # ``path`` rewritten since, then ``delay`` seconds
        before, seen = mtime(path), []
        def ready():
            if not seen and mtime(path) != before:
                seen.append(time.monotonic())
            return bool(seen) and time.monotonic() >= seen[0] + delay
        return ready

    rng = random.Random(15)
    plan = ["imports", "before first checkpoint", "checkpoint write", "after checkpoint",
            "random", "checkpoint write", "random"]
    launcher = subprocess.Popen([sys.executable, "-c", _LAUNCHER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    kills, moments = 0, []
    try:
        for number, moment in enumerate(plan):
            argv, log = command + [str(killed)], tmp_path / f"launch-{number}.log"
            if moment == "imports":  # a fresh interpreter, killed while it imports
                process = subprocess.Popen([sys.executable, "-m", "seqvae", *argv],
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                ready = (lambda t=time.monotonic() + 0.5: time.monotonic() > t)
            else:
                ready = {"before first checkpoint": (killed / "run.json").exists,
                         "checkpoint write": writing(temporary()),
                         "after checkpoint": changed(index),
                         # metrics.jsonl is rewritten when the run is restored, then appended
                         "random": changed(metrics, delay=rng.uniform(0.0, 0.6))}[moment]
                process = _Launched(launcher, argv, log)
            if not _kill_when(process, ready):
                pytest.fail(f"the run ended (status {process.returncode}) before kill {number + 1} "
                            f"({moments}); {log.read_text()[-2000:] if log.exists() else ''}")
            kills += 1
            latest = tf.train.latest_checkpoint(str(checkpoints)) if index.exists() else None
            moments.append(f"{moment} -> {os.path.basename(latest or 'none')}")
            if moment == "before first checkpoint":
                assert not index.exists(), "a checkpoint was written before the kill"
    finally:
        launcher.stdin.close()
        launcher.wait()
    assert kills == len(plan) and any("-> ckpt-" in m for m in moments), moments
    done = subprocess.run([sys.executable, "-m", "seqvae", *command, str(killed)],
                          capture_output=True, text=True)  # the real launch, to the end
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    for a, b in zip(run_weights(str(straight)), run_weights(str(killed))):
        np.testing.assert_array_equal(a, b)
    steps = [r["step"] for r in read_jsonl(str(metrics)) if r["kind"] == "step"]
    assert steps == list(range(3, PREEMPTED_STEPS + 1, 3))  # every redone step logged once
    assert not temporary(), "what the cut-off saves left was not removed"
    print(f"{kills} kills ({', '.join(moments)}) in {time.monotonic() - started:.0f}s")


# --- one command for every start ---------------------------------------------------------------


def test_resume_starts_a_missing_run_then_leaves_it_finished(tmp_path, smiles, capsys):
    run_dir = str(tmp_path / "run")
    config = with_train(tiny_config(), max_steps=6, epochs=5)
    summary = train(config, run_dir, smiles, resume=True)
    assert summary["steps"] == 6
    assert "nothing to resume in" in capsys.readouterr().err
    files = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
    metrics = open(os.path.join(run_dir, "metrics.jsonl")).read()
    again = train(config, run_dir, smiles, resume=True)
    assert again["already_finished"] and again["steps"] == 6
    assert again["weights_checksum"] == summary["weights_checksum"]
    assert "already finished at step 6 (max_steps)" in capsys.readouterr().err
    assert sorted(os.listdir(os.path.join(run_dir, "checkpoints"))) == files
    assert open(os.path.join(run_dir, "metrics.jsonl")).read() == metrics
    longer = train(with_train(config, max_steps=8), run_dir, smiles, resume=True)
    assert longer["steps"] == 8 and not longer.get("already_finished")
    with pytest.raises(SeqvaeError, match="settings differ.*train.learning_rate"):
        train(with_train(config, learning_rate=0.5), run_dir, smiles, resume=True)


def test_resume_of_a_run_killed_before_its_first_checkpoint_starts_it(tmp_path, smiles):
    run_dir = str(tmp_path / "run")
    config = with_train(tiny_config(), max_steps=5, epochs=5)
    straight = train(config, run_dir, smiles)["weights_checksum"]
    shutil.rmtree(os.path.join(run_dir, "checkpoints"))  # as if killed before the first save
    summary = train(config, run_dir, smiles, resume=True)
    assert summary["steps"] == 5 and summary["weights_checksum"] == straight
    steps = [r["step"] for r in read_jsonl(os.path.join(run_dir, "metrics.jsonl")) if r["kind"] == "step"]
    assert steps == [2, 4]


def test_a_run_that_used_its_time_budget_is_finished_unless_given_more(tmp_path, smiles, capsys):
    run_dir = str(tmp_path / "run")
    config = with_train(tiny_config(), epochs=10**6, time_budget=0.3)
    first = train(config, run_dir, smiles)
    assert first["stop_reason"] == "time_budget"
    again = train(config, run_dir, smiles, resume=True)
    assert again["already_finished"] and again["steps"] == first["steps"]
    assert f"already finished at step {first['steps']} (time_budget)" in capsys.readouterr().err
    more = train(with_train(config, time_budget=0.6), run_dir, smiles, resume=True)
    assert more["steps"] > first["steps"]
