"""The explicit custom training loop: a compiled step plus hooks.

``train(config, run_dir, data)`` opens the data (``seqvae.training.inputs``), builds the model
and the compiled ``tf.GradientTape`` step (``seqvae.training.steps``), and runs it over the
epochs' batches; after each step and each epoch the hooks (``seqvae.training.hooks``) log,
validate, checkpoint, watch the time budget, signals and divergence, and may stop the run.
Everything that makes a step random is a pure function of ``(config.train.seed, step)`` and the
data order a pure function of ``(seed, epoch)``, so a run resumed from a checkpoint ends with
exactly the weights of an uninterrupted run. The loop trains and nothing else: keeping the
prior and exporting are ``seqvae.workflows.train``'s.
"""

from __future__ import annotations

import os
import time

import numpy as np
import tensorflow as tf

from seqvae import checkpoints as checkpoints_lib
from seqvae import files
from seqvae import run as run_lib
from seqvae.config import Config, TrainConfig, config_differences
from seqvae.data import sources
from seqvae.data.properties import parse_property_names
from seqvae.errors import SeqvaeError
from seqvae.model.precision import describe_precision
from seqvae.training import distribute as distribute_lib
from seqvae.training import hooks as hooks_lib
from seqvae.training.inputs import open_training_data
from seqvae.training.steps import (build_training, make_eval_step, make_train_step,
                                   planned_steps, softmax_grammar, weights_checksum)
from seqvae.messages import note


def train(config: Config, run_dir: str, data=None, *, resume: bool = False,
          strict: bool = False, strategy: str | tf.distribute.Strategy = "default",
          codec=None, init=None) -> dict:
    """Trains a SequenceVAE into ``run_dir`` (created, or continued with ``resume``).

    Args:
      config: the run's configuration.
      run_dir: the run directory (see ``seqvae.run``).
      data: a path, ``moses:SPLIT``, list of strings or numpy array; None = the run's stored
        source when resuming, else the bundled MOSES train split.
      resume: continue from the latest checkpoint in ``run_dir``.
      strict: fail on invalid SMILES lines instead of skipping them.
      strategy: ``default``, ``mirrored``, ``multi-worker`` (reads ``TF_CONFIG``) or a
        ``tf.distribute.Strategy``. ``config.train.batch_size`` is the global batch.
      codec: the ``TextCodec`` (vocabulary, tokenizer, length) a new run encodes its data with;
        None fits one to the data (a resumed run keeps its own).
      init: ``init(model)`` sets the starting weights of a run that has no checkpoint yet
        (``seqvae.finetune``: a trained run's); None: random, seeded by ``train.seed``.

    Returns:
      A summary dict: steps, epochs, stop reason, last metrics, wall time, padding fraction.
    """
    if isinstance(strategy, str):
        strategy = distribute_lib.make_strategy(strategy)
    run_dir = os.fspath(run_dir)
    run_lib.check_trainable(run_dir, "seqvae train")  # a model that ships with seqvae: read-only
    has_run = os.path.exists(os.path.join(run_dir, "run.json"))
    if resume and not has_run:  # killed before it wrote its run files, or never started
        if distribute_lib.is_chief(strategy):
            note(f"seqvae: nothing to resume in {run_dir} yet (no run.json); starting the run")
        resume = False
    if not distribute_lib.is_chief(strategy):
        # Other workers keep their own files (checkpoints included) in a temporary directory.
        import tempfile

        worker_dir = tempfile.mkdtemp(prefix="seqvae-worker-")
        if resume:
            import shutil

            shutil.rmtree(worker_dir)
            shutil.copytree(run_dir, worker_dir, ignore=shutil.ignore_patterns(".lock"))
        return _train_locked(config, worker_dir, data, resume, strict, strategy, False, codec, init)
    if not resume and has_run:
        raise SeqvaeError(f"{run_dir}: already holds a run; resume it or train into "
                          "another directory")
    try:  # a full disk or a read-only run directory, from the lock file on
        os.makedirs(run_dir, exist_ok=True)
        with run_lib.RunLock(run_dir):
            return _train_locked(config, run_dir, data, resume, strict, strategy, True, codec, init)
    except OSError as error:
        raise SeqvaeError(f"{error.filename or run_dir}: {error.strerror or error}; the "
                          "checkpoints already written are intact: fix it and run the same "
                          "command with --resume") from None


def _train_locked(config: Config, run_dir: str, data, resume: bool, strict: bool,
                  strategy: tf.distribute.Strategy, chief: bool, codec, init) -> dict:
    started = time.monotonic()
    config, source, stored = _open(config, run_dir, data, resume, strict, strategy, chief, codec)
    tcfg, properties = config.train, source.properties
    total_steps = planned_steps(tcfg, source.steps_per_epoch)
    feature_grammar = None
    if config.model.grammar_features:
        from seqvae.model.grammar import grammar_for

        feature_grammar = grammar_for(source.vocab.tokens, source.tokenizer)
    model, optimizer, counters = build_training(config, source.max_len, len(source.vocab),
                                                total_steps, strategy,
                                                len(properties["names"]) if properties else 0,
                                                feature_grammar)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, **counters)
    manager = tf.train.CheckpointManager(checkpoint, run_lib.checkpoint_dir(run_dir),
                                         max_to_keep=tcfg.keep_checkpoints)
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    restored = _restore(checkpoint, manager, model, counters, run_dir, chief) if stored else None
    if restored is not None:
        finished = _finished_reason(tcfg, counters, metrics_path)
        if finished:
            return _finish_again(run_dir, config, finished, counters, model, chief, started,
                                 source)
    if restored is None and init is not None:
        init(model)
    planned = counters["planned"]
    if not tcfg.time_budget:  # a resumed run may train longer than first planned
        planned.assign(total_steps)
    grammar = softmax_grammar(config, source.vocab.tokens, source.tokenizer)
    train_step = make_train_step(model, optimizer, tcfg, planned, counters, strategy,
                                 grammar=grammar, max_len=source.max_len)
    eval_step = make_eval_step(model, tcfg, planned, grammar, source.max_len,
                               model.num_properties if properties else 0)
    writer = tf.summary.create_file_writer(os.path.join(run_dir, "tensorboard"))
    progress = hooks_lib.Progress(int(planned.numpy()), tcfg.log_every) if chief else None
    if chief:
        note(describe_limits(config, source, total_steps))
    skipped = sum(r.get("kind") == "skipped" for r in files.read_jsonl(metrics_path))
    divergence = hooks_lib.Divergence(tcfg, metrics_path, chief, skipped)
    log = hooks_lib.MetricsLog(tcfg, metrics_path, writer, divergence, progress, bool(properties))
    saving = hooks_lib.Checkpointing(tcfg, manager, model, divergence,
                                     checkpoints_lib.checkpoint_step(restored) if restored else -1)
    best = hooks_lib.BestWeights(run_dir, model) if tcfg.restore_best else None
    hooks = [divergence, log, hooks_lib.TimeBudget(tcfg, planned, total_steps, progress),
             hooks_lib.Validation(tcfg, source.validation, eval_step, counters, log, best), saving,
             hooks_lib.Signals(), hooks_lib.StepLimit(tcfg)]
    state, stop_reason = run_loop(train_step, source, counters, hooks, tcfg.epochs, strategy)
    step = int(counters["step"].numpy())
    writer.flush()
    values = state.values if state else {}
    if stop_reason == "diverged":
        latest = (os.path.join(manager.directory, f"ckpt-{saving.saved_step}")
                  if saving.saved_step >= 0 else None)
        raise SeqvaeError(
            f"{run_dir}: training diverged: {divergence.streak} consecutive steps up to step "
            f"{step} had a NaN or infinite loss or gradient (loss {values.get('loss')}) and were "
            "skipped; " + (f"the last good checkpoint {latest} is intact" if latest else
                           "no checkpoint was written") + "; lower train.learning_rate (or set "
            "train.clip_norm) and train into a new run directory")
    weights_of = best.restore() if best is not None and stop_reason != "interrupted" else None
    if saving.saved_step != step or weights_of is not None:
        saving.save(step)
    if chief:
        files.append_jsonl(metrics_path, {"kind": "end", "step": step, "stop_reason": stop_reason,
                                          "time_budget": tcfg.time_budget,
                                          "skipped_steps": divergence.skipped,
                                          **({"weights_of_step": weights_of}
                                             if weights_of is not None else {})})
    train_time, seen = (state.train_time, state.seen) if state else (0.0, 0)
    return {"run_dir": run_dir, "data": source, "steps": step,
            "epochs": int(counters["epoch"].numpy()), "stop_reason": stop_reason, "last": values,
            "train_seconds": train_time, "wall_seconds": time.monotonic() - started,
            "sequences_per_second": seen / max(train_time, 1e-9),
            "padding_fraction": source.padding_fraction(), "skipped_invalid": source.skipped,
            "skipped_nonfinite": divergence.skipped, "replicas": strategy.num_replicas_in_sync,
            "weights_of_step": weights_of, "chief": chief,
            "weights_checksum": weights_checksum(model)}


def run_loop(train_step, source, counters: dict, hooks: list, epochs: int,
             strategy: tf.distribute.Strategy) -> tuple[hooks_lib.StepState | None, str]:
    """Steps over the epochs' batches (from the counters' position) until a hook stops the run
    or ``epochs`` (0: no limit) are done; ``(the last step's state, the stop reason)``."""
    workers = distribute_lib.worker_count(strategy)
    state, train_time, seen, steps_here = None, 0.0, 0, 0
    try:
        while not epochs or int(counters["epoch"].numpy()) < epochs:
            epoch = int(counters["epoch"].numpy())
            for hook in hooks:
                hook.before_epoch(epoch)
            for ids, rows in source.epoch(epoch, int(counters["batch"].numpy())):
                tick = time.monotonic()
                out = train_step(*ids) if isinstance(ids, tuple) else train_step(ids)
                values = {k: float(v) for k, v in out.items()}
                finite = values.pop("finite") >= 1.0
                train_time += time.monotonic() - tick
                seen, steps_here = seen + rows, steps_here + 1
                state = hooks_lib.StepState(int(counters["step"].numpy()), epoch, values, finite,
                                            train_time, seen, steps_here)
                reason = hooks_lib.most_urgent([hook.after_step(state) for hook in hooks])
                if workers > 1:  # every worker must stop at the same step
                    reason = _agree_on_stop(strategy, reason)
                if reason:
                    return state, reason
            counters["epoch"].assign_add(1)
            counters["batch"].assign(0)
            step = int(counters["step"].numpy())
            reason = hooks_lib.most_urgent([hook.after_epoch(epoch, step) for hook in hooks])
            if reason:
                return state, reason
        return state, "epochs"
    except tf.errors.OpError as error:
        if workers > 1:
            raise SeqvaeError(f"lost contact with another worker ({type(error).__name__}: "
                              f"{str(error).strip().splitlines()[0][:160]})") from None
        raise
    finally:
        for hook in hooks:
            hook.close()


def _open(config: Config, run_dir: str, data, resume: bool, strict: bool,
          strategy: tf.distribute.Strategy, chief: bool, codec=None):
    """``(config, training data, stored run or None)``: the data (the stored run's source when
    resuming without one), the config as the data needs it (arrays: class ids), checked against
    the stored run's, and the run files of a new run."""
    stored = run_lib.read_run_files(run_dir) if resume else None
    if stored is not None and data is None and stored.info.get("data_source") not in (
            None, "list", "array"):
        data = stored.info["data_source"]
    if config.data.properties:  # a misspelt name stops the run before its data is read
        parse_property_names(config.data.properties)
    for_class_ids = sources.is_array_source(data) and config.data.tokenizer != "word"
    if for_class_ids:
        config = config.for_class_ids()
    if stored is not None:
        _check_resume_config(stored.config, config, run_dir)
    source = open_training_data(config, data, stored, strict or not config.data.skip_invalid,
                                 strategy, run_dir, codec)
    if for_class_ids and chief:
        note(f"seqvae: {data if isinstance(data, str) else 'the array'} holds class ids: "
              "its classes are the tokens (data.tokenizer=word), without Kekule SMILES or "
              "the SMILES grammar")
    if not stored:
        properties = source.properties  # {"names", "mean", "std"} of a jointly trained head
        run_lib.write_run_files(run_dir, config, source.vocab, {
            "max_len": source.max_len, "vocab_size": len(source.vocab),
            "tokenizer": source.tokenizer, "data_source": source.source,
            "train_size": source.train_size, "validation_size": source.validation_size,
            **({"properties": properties} if properties else {})})
    return config, source, stored


def _restore(checkpoint, manager, model, counters: dict, run_dir: str, chief: bool):
    """The newest checkpoint that restores (None: none yet), orphans of a cut-off save removed
    and the metrics log cut back to its step."""
    checkpoints_lib.remove_orphans(manager.directory)  # left by a save that a kill cut off
    restored = checkpoints_lib.restore_newest(checkpoint, manager.directory, model, what=run_dir)
    if restored is None and chief:
        note(f"seqvae: {run_dir} holds no checkpoint yet; starting from step 0")
    run_lib.truncate_metrics(os.path.join(run_dir, "metrics.jsonl"), int(counters["step"].numpy()))
    return restored


def _check_resume_config(stored: Config, given: Config, run_dir: str) -> None:
    """Refuses a resume whose settings differ from the run's (all but how long it trains)."""
    differences = config_differences(stored, given)
    if differences:
        raise SeqvaeError(f"{run_dir}: the settings differ from the run's config.json "
                          f"({'; '.join(differences)}); resume with the run's own settings or "
                          "train into a new --out")


def _finished_reason(config: TrainConfig, counters: dict, metrics_path: str) -> str:
    """Why a restored run has nothing left to train under ``config`` ('' when it has): re-running
    the command of a finished run must not train one more step."""
    step = int(counters["step"].numpy())
    if config.epochs and int(counters["epoch"].numpy()) >= config.epochs:
        return "epochs"
    if config.max_steps and step >= config.max_steps:
        return "max_steps"
    if config.patience and int(counters["bad_validations"].numpy()) >= config.patience:
        return "plateau"
    ends = [r for r in files.read_jsonl(metrics_path) if r.get("kind") == "end"]
    if (config.time_budget and ends and ends[-1].get("step") == step
            and ends[-1].get("stop_reason") == "time_budget"
            and config.time_budget <= ends[-1].get("time_budget", 0)):
        return "time_budget"  # a larger budget continues it
    return ""


def _finish_again(run_dir: str, config: Config, reason: str, counters: dict, model, chief: bool,
                  started: float, source) -> dict:
    """The summary of a run that had already finished (its export redone if it was lost)."""
    step = int(counters["step"].numpy())
    if chief:
        note(f"seqvae: {run_dir} already finished at step {step} ({reason}); nothing to train")
    return {"run_dir": run_dir, "data": source, "steps": step, "epochs": int(counters["epoch"].numpy()),
            "stop_reason": reason, "already_finished": True, "last": {}, "train_seconds": 0.0,
            "wall_seconds": time.monotonic() - started, "sequences_per_second": 0.0,
            "padding_fraction": None, "skipped_invalid": 0, "skipped_nonfinite": 0,
            "replicas": 1, "chief": chief, "weights_checksum": weights_checksum(model)}


def describe_limits(config: Config, source, total_steps: int) -> str:
    """One line with what bounds the run (data, epochs and steps, time, early stopping) and the
    precision it computes in."""
    tcfg, dcfg = config.train, config.data
    parts = [f"{source.train_size:,} training and {source.validation_size:,} validation "
             f"sequences" + (f" (data.limit {dcfg.limit:,}"
                             + (", drawn at random)" if dcfg.subset == "random" else ")")
                             if dcfg.limit else ""),
             f"batch {tcfg.batch_size}"]
    if tcfg.epochs:
        parts.append(f"up to {tcfg.epochs} epochs = {total_steps:,} steps")
    if tcfg.max_steps:
        parts.append(f"max_steps {tcfg.max_steps:,}")
    parts.append(f"time budget {tcfg.time_budget:g}s (schedules re-planned to fit)"
                 if tcfg.time_budget else "no time budget")
    parts.append(f"stops after {tcfg.patience} validations without improvement"
                 if tcfg.patience else "no early stopping")
    parts.append(describe_precision(tcfg.precision))
    if config.model.prior == "aggregate":
        parts.append(f"then keeps the aggregate posterior of "
                     f"{min(config.model.prior_encodings, source.train_size):,} "
                     f"training sequences as the prior (widened {config.model.prior_widen:g}x)")
    return "seqvae: training on " + ", ".join(parts)


def _agree_on_stop(strategy: tf.distribute.Strategy, reason: str) -> str:
    """The most urgent stop reason of any worker (an all-reduced vote), so all stop together."""
    reasons = ("",) + hooks_lib.STOP_PRIORITY[::-1]  # the higher the index, the more urgent
    vote = tf.one_hot(reasons.index(reason), len(reasons))
    votes = strategy.reduce("sum", strategy.run(lambda: tf.identity(vote)), axis=None).numpy()
    return reasons[int(np.flatnonzero(votes > 0).max())]
