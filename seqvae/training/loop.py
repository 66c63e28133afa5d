"""The explicit custom training loop.

``train(config, run_dir, data)`` opens the data (``seqvae.training.inputs``), builds the model, and runs a
``tf.GradientTape`` step compiled with ``tf.function`` (optionally ``jit_compile=True``): Adam,
global-norm clipping, a learning-rate schedule, a KL-weight schedule, free bits, word dropout, a
validation pass each epoch. Everything that makes a step random is a pure function of
``(config.train.seed, step)`` and the data order a pure function of ``(seed, epoch)``, so a run
resumed from a checkpoint ends with exactly the weights of an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from seqvae import files
from seqvae.config import Config, TrainConfig, config_differences
from seqvae.data import sources
from seqvae.errors import SeqvaeError
from seqvae.model.vae import SequenceVAE, precision_policy
from seqvae.training import checkpoints as checkpoints_lib
from seqvae.training import distribute as distribute_lib
from seqvae.training import rundir as run_lib
from seqvae.training.inputs import open_training_data
from seqvae.training.objective import compute_losses
from seqvae.training.precision import describe_precision, resolve_precision
from seqvae.training.schedules import LearningRateSchedule


def make_train_step(model: SequenceVAE, optimizer: keras.optimizers.Optimizer,
                    config: TrainConfig, total_steps: int, counters: dict[str, tf.Variable],
                    strategy: tf.distribute.Strategy | None = None, grammar=None,
                    max_len: int = 0):
    """Builds the compiled step ``per-replica ids (B, T) -> metrics``; it advances the counters.

    ``grammar``, ``max_len``: the constrained softmax of ``train.grammar_softmax``
    (``compute_losses``).

    Advancing ``step``/``batch`` inside the compiled function keeps weights, optimizer and
    counters consistent: an interrupt lands before or after a whole step, never inside one.
    With several replicas the gradient-norm clip uses the global (all-reduced) gradient, and each
    replica's gradient is scaled by the same factor before the optimizer sums them.

    A step whose loss or gradient is NaN or infinite is skipped: nothing reaches the weights or
    Adam's moments, the counters still advance, and the metrics say ``finite`` 0 (else 1).
    """
    strategy = strategy or tf.distribute.get_strategy()
    variables = model.trainable_variables
    scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

    def replica_gradients(ids, targets=None):
        """``ids -> (gradients, metrics)``: the clipped gradients, and whether they are finite."""
        context = tf.distribute.get_replica_context()
        replicated = context is not None and context.num_replicas_in_sync > 1
        shard = distribute_lib.replica_shard(ids) if replicated else None
        sum_replicas = (lambda x: context.all_reduce("sum", x)) if replicated else None
        with tf.GradientTape() as tape:
            metrics = compute_losses(model, ids, counters["step"], config, total_steps, shard=shard,
                                     sum_replicas=sum_replicas, grammar=grammar, max_len=max_len,
                                     targets=targets)
            loss = optimizer.scale_loss(metrics["loss"]) if scaling else metrics["loss"]
        if scaling:  # unscaled here so that clipping sees the true norm
            scale = tf.cast(optimizer.dynamic_scale, tf.float32)
        # Row gathers (one-hot inputs) give IndexedSlices: Keras's Adam would apply them as a
        # sparse update (squares of duplicate rows summed separately) and all-reduce would see
        # different shapes per replica; dense gradients give the standard Adam step everywhere.
        gradients = [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]
        if scaling:
            gradients = [g / scale for g in gradients]
        if replicated:
            norm = tf.linalg.global_norm(context.all_reduce("sum", gradients))
            if config.clip_norm > 0:
                scale = tf.minimum(1.0, config.clip_norm / tf.maximum(norm, 1e-12))
                gradients = [g * scale for g in gradients]
        elif config.clip_norm > 0:
            gradients, norm = tf.clip_by_global_norm(gradients, config.clip_norm)
        else:
            norm = tf.linalg.global_norm(gradients)
        if scaling:  # LossScaleOptimizer.apply unscales (and skips steps with inf/nan) itself,
            # and inf gradients are routine for it (its loss scale adapts): only the loss counts
            gradients = [g * scale for g in gradients]
            finite = tf.math.is_finite(metrics["loss"])
        else:  # the norm is global (all-reduced): every replica decides alike
            finite = tf.math.is_finite(metrics["loss"]) & tf.math.is_finite(norm)
        metrics["grad_norm"] = norm / context.num_replicas_in_sync if replicated else norm
        metrics["finite"] = tf.cast(finite, tf.float32)  # 1: applied, 0: skipped
        return gradients, metrics

    def replica_step(ids, targets=None):
        gradients, metrics = replica_gradients(ids, targets)
        if scaling:
            optimizer.apply(gradients, variables)
        else:
            def apply():
                optimizer.apply(gradients, variables)
                return tf.constant(True)

            tf.cond(metrics["finite"] > 0, apply, lambda: tf.constant(False))
        return metrics

    if strategy.num_replicas_in_sync == 1:
        def train_step(ids, targets=None):
            metrics = replica_step(ids, targets)
            metrics["learning_rate"] = tf.cast(optimizer.learning_rate, tf.float32)
            counters["step"].assign_add(1)
            counters["batch"].assign_add(1)
            return metrics

        signature = [tf.TensorSpec([None, None], tf.int32)]  # one trace for every bucket shape
        if model.num_properties:  # and the property targets (B, P)
            signature.append(tf.TensorSpec([None, model.num_properties], tf.float32))
        return tf.function(train_step, jit_compile=config.jit_compile,
                           input_signature=signature, autograph=False)

    # Several replicas: the optimizer's cross-replica update cannot sit inside a tf.cond in the
    # replica function, so the skip is decided between two compiled calls (the loop reads the
    # metrics after every step anyway). The counters advance only after the whole step.
    compiled_gradients = tf.function(replica_gradients, jit_compile=config.jit_compile or None,
                                     autograph=False)

    @tf.function(autograph=False, reduce_retracing=True)  # one trace for most batch lengths
    def distributed_gradients(ids):
        gradients, per_replica = strategy.run(compiled_gradients, args=(ids,))
        metrics = {k: strategy.reduce("sum", v, axis=None) for k, v in per_replica.items()}
        metrics["kl_weight"] = metrics["kl_weight"] / strategy.num_replicas_in_sync
        metrics["finite"] = metrics["finite"] / strategy.num_replicas_in_sync
        return gradients, metrics

    @tf.function(autograph=False)
    def distributed_apply(gradients):
        # The identities place each gradient on its replica's device: a gradient that crossed
        # the function boundary as a plain tensor (one local replica, as on each multi-worker
        # worker) has no device, and the all-reduce inside apply needs one for its destination.
        strategy.run(lambda grads: optimizer.apply([tf.identity(g) for g in grads], variables),
                     args=(gradients,))

    @tf.function(autograph=False)
    def advance():
        counters["step"].assign_add(1)
        counters["batch"].assign_add(1)
        return tf.cast(optimizer.learning_rate, tf.float32)

    def distributed_step(ids):
        gradients, metrics = distributed_gradients(ids)
        if scaling or float(metrics["finite"]) >= 1.0:
            distributed_apply(gradients)
        metrics["learning_rate"] = advance()
        return metrics

    return distributed_step


class _Progress:
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
            print(f"step {step}/{self.total} epoch {epoch + 1} "
                  + " ".join(f"{name} {value:.4g}" for name, value in shown), file=sys.stderr,
                  flush=True)

    def close(self) -> None:
        if self.bar is not None:
            print(file=sys.stderr)


def _check_resume_config(stored: Config, given: Config, run_dir: str) -> None:
    """Refuses a resume whose settings differ from the run's (all but how long it trains)."""
    differences = config_differences(stored, given)
    if differences:
        raise SeqvaeError(f"{run_dir}: the settings differ from the run's config.json "
                          f"({'; '.join(differences)}); resume with the run's own settings or "
                          "train into a new --out")


def build_training(config: Config, max_len: int, vocab_size: int, total_steps: int,
                   strategy: tf.distribute.Strategy | None = None, num_properties: int = 0,
                   grammar=None):
    """Model, optimizer (built, so a checkpoint can restore it) and counters, in the strategy."""
    keras.utils.set_random_seed(config.train.seed)
    with (strategy or tf.distribute.get_strategy()).scope():
        precision = resolve_precision(config.train.precision)
        with precision_policy(precision):
            model = SequenceVAE(config.model, vocab_size, max_len,
                                num_properties=num_properties, grammar=grammar).build_weights()
        planned = tf.Variable(total_steps, dtype=tf.int64, trainable=False)
        optimizer = keras.optimizers.Adam(learning_rate=LearningRateSchedule(config.train, planned))
        if precision == "mixed_float16":  # float16 needs loss scaling
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
        counters = {name: tf.Variable(0, dtype=tf.int64, name=name, trainable=False)
                    for name in ("step", "epoch", "batch", "bad_validations")}
        # the run's planned length, which schedules read: re-planned when time bounds the run
        counters["planned"] = planned
        counters["best_val"] = tf.Variable(float("inf"), dtype=tf.float64, name="best_val",
                                           trainable=False)
    return model, optimizer, counters


def planned_steps(config: TrainConfig, steps_per_epoch: int) -> int:
    """Length of the run in steps (what cosine decay and the progress bar aim at)."""
    total = config.epochs * steps_per_epoch
    return min(total, config.max_steps) if config.max_steps else total


def softmax_grammar(config: Config, tokens, tokenizer: str):
    """The grammar of ``train.grammar_softmax``: None when it is off or the run is not SMILES
    (only SMILES runs have a grammar; the presets' recipe turns it on for every run)."""
    if not config.train.grammar_softmax:
        return None
    from seqvae.model.grammar import grammar_for

    return grammar_for(tokens, tokenizer)


def train(config: Config, run_dir: str, data=None, *, resume: bool = False,
          strict: bool = False, strategy: str | tf.distribute.Strategy = "default") -> dict:
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

    Returns:
      A summary dict: steps, epochs, stop reason, last metrics, wall time, padding fraction.
    """
    if isinstance(strategy, str):
        strategy = distribute_lib.make_strategy(strategy)
    run_dir = os.fspath(run_dir)
    has_run = os.path.exists(os.path.join(run_dir, "run.json"))
    if resume and not has_run:  # killed before it wrote its run files, or never started
        if distribute_lib.is_chief(strategy):
            print(f"seqvae: nothing to resume in {run_dir} yet (no run.json); starting the run",
                  file=sys.stderr, flush=True)
        resume = False
    if not distribute_lib.is_chief(strategy):
        # Other workers keep their own files (checkpoints included) in a temporary directory.
        import tempfile

        worker_dir = tempfile.mkdtemp(prefix="seqvae-worker-")
        if resume:
            import shutil

            shutil.rmtree(worker_dir)
            shutil.copytree(run_dir, worker_dir, ignore=shutil.ignore_patterns(".lock"))
        return _train_locked(config, worker_dir, data, resume, strict, strategy, chief=False)
    if not resume and has_run:
        raise SeqvaeError(f"{run_dir}: already holds a run; add --resume to continue it "
                          "or choose another --out")
    try:  # a full disk or a read-only run directory, from the lock file on
        os.makedirs(run_dir, exist_ok=True)
        with run_lib.RunLock(run_dir):
            return _train_locked(config, run_dir, data, resume, strict, strategy, chief=True)
    except OSError as error:
        raise SeqvaeError(f"{error.filename or run_dir}: {error.strerror or error}; the "
                          "checkpoints already written are intact: fix it and run the same "
                          "command with --resume") from None


def _train_locked(config: Config, run_dir: str, data, resume: bool, strict: bool,
                  strategy: tf.distribute.Strategy, chief: bool) -> dict:
    started = time.monotonic()
    stored = run_lib.read_run_files(run_dir) if resume else None
    if stored is not None and data is None and stored.info.get("data_source") not in (
            None, "list", "array"):
        data = stored.info["data_source"]
    for_class_ids = sources.is_array_source(data) and config.data.tokenizer != "word"
    if for_class_ids:
        config = config.for_class_ids()
    if stored is not None:
        _check_resume_config(stored.config, config, run_dir)
    source = open_training_data(config, data, stored, strict or not config.data.skip_invalid,
                                 strategy, run_dir)
    if for_class_ids and chief:
        print(f"seqvae: {data if isinstance(data, str) else 'the array'} holds class ids: "
              "its classes are the tokens (data.tokenizer=word), without Kekule SMILES or "
              "the SMILES grammar", file=sys.stderr, flush=True)
    properties = source.properties  # {"names", "mean", "std"} of a jointly trained head
    if not stored:
        run_lib.write_run_files(run_dir, config, source.vocab, {
            "max_len": source.max_len, "vocab_size": len(source.vocab),
            "tokenizer": source.tokenizer, "data_source": source.source,
            "train_size": source.train_size, "validation_size": source.validation_size,
            **({"properties": properties} if properties else {})})
    tcfg = config.train
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
    restored = None
    if resume:
        checkpoints_lib.remove_orphans(manager.directory)  # left by a save that a kill cut off
        restored = checkpoints_lib.restore_newest(checkpoint, manager.directory, model, what=run_dir)
        if restored is None and chief:
            print(f"seqvae: {run_dir} holds no checkpoint yet; starting from step 0",
                  file=sys.stderr, flush=True)
        run_lib.truncate_metrics(metrics_path, int(counters["step"].numpy()))
    saved_step = checkpoints_lib.checkpoint_step(restored) if restored else -1
    skipped = sum(r.get("kind") == "skipped" for r in files.read_jsonl(metrics_path))
    if restored is not None:
        finished = _finished_reason(tcfg, counters, metrics_path)
        if finished:
            return _finish_again(run_dir, config, finished, counters, model, chief, started,
                                 source)
    planned = counters["planned"]
    if not tcfg.time_budget:  # a resumed run may train longer than first planned
        planned.assign(total_steps)
    grammar = softmax_grammar(config, source.vocab.tokens, source.tokenizer)
    train_step = make_train_step(model, optimizer, tcfg, planned, counters, strategy,
                                 grammar=grammar, max_len=source.max_len)
    eval_signature = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int64)]
    if properties:
        eval_signature.append(tf.TensorSpec([None, model.num_properties], tf.float32))
    eval_step = tf.function(
        lambda ids, step, targets=None: compute_losses(
            model, ids, step, tcfg, planned, training=False, grammar=grammar,
            max_len=source.max_len, targets=targets),
        input_signature=eval_signature, autograph=False)
    trackers = {name: keras.metrics.Mean(name=name) for name in
                ("loss", "recon", "kl", "kl_weight") + (("property",) if properties else ())}
    writer = tf.summary.create_file_writer(os.path.join(run_dir, "tensorboard"))
    progress = _Progress(int(planned.numpy()), tcfg.log_every) if chief else None
    workers = distribute_lib.worker_count(strategy)
    if chief:
        print(describe_limits(config, source, total_steps), file=sys.stderr, flush=True)

    def validate(epoch: int, kind: str) -> bool:
        """Validation pass, its record, and the patience count; True when the run plateaued."""
        if not (chief or tcfg.patience):  # every worker validates when patience must agree
            return False
        record = {"kind": kind, "epoch": epoch, "step": int(counters["step"].numpy()),
                  **_validation_losses(source.validation(), eval_step)}
        if kind == "epoch":
            record.update({f"train_{k}": float(t.result()) for k, t in trackers.items()})
        if chief:
            _log_record(record, metrics_path, writer)
        if not tcfg.patience or "val_loss" not in record:
            return False
        if record["val_loss"] < float(counters["best_val"].numpy()):
            counters["best_val"].assign(record["val_loss"])
            counters["bad_validations"].assign(0)
        else:
            counters["bad_validations"].assign_add(1)
        return int(counters["bad_validations"].numpy()) >= tcfg.patience

    interrupted = []
    previous_handlers = {}  # Ctrl-C, and SIGTERM (a scheduler's notice before it preempts the job):
    if _in_main_thread():  # the step ends, a checkpoint is written, the run stops "interrupted"
        for number in (getattr(signal, name) for name in ("SIGINT", "SIGTERM") if hasattr(signal, name)):
            previous_handlers[number] = signal.signal(number, lambda *_: interrupted.append(True))
    stop_reason, values, seen, train_time, steps_here = "epochs", {}, 0, 0.0, 0
    streak = 0  # consecutive skipped (non-finite) steps

    def save(step: int) -> None:
        nonlocal saved_step
        checkpoints_lib.save(manager, step, model.weights)  # every worker: collective save
        saved_step = step
    try:
        while int(counters["epoch"].numpy()) < tcfg.epochs:
            epoch = int(counters["epoch"].numpy())
            batches = source.epoch(epoch, int(counters["batch"].numpy()))
            for tracker in trackers.values():
                tracker.reset_state()
            for ids, rows in batches:
                tick = time.monotonic()
                out = train_step(*ids) if isinstance(ids, tuple) else train_step(ids)
                values = {k: float(v) for k, v in out.items()}
                finite = values.pop("finite") >= 1.0
                train_time += time.monotonic() - tick
                seen += rows
                step = int(counters["step"].numpy())
                if finite:
                    streak = 0
                    for name, tracker in trackers.items():
                        tracker.update_state(values[name])
                else:
                    streak, skipped = streak + 1, skipped + 1
                    if chief:
                        files.append_jsonl(metrics_path, {
                            "kind": "skipped", "step": step, "epoch": epoch, "consecutive": streak,
                            "skipped_steps": skipped, **_json_safe(values)})
                rate = seen / max(train_time, 1e-9)
                if chief:
                    progress.update(step, epoch, values, rate)
                    if step % tcfg.log_every == 0:
                        record = {"kind": "step", "step": step, "epoch": epoch, "seq_per_s": rate,
                                  "train_s": round(train_time, 2), "skipped_steps": skipped,
                                  **_json_safe(values)}
                        files.append_jsonl(metrics_path, record)
                        with writer.as_default(step=step):
                            for key, value in values.items():
                                tf.summary.scalar(f"train/{key}", value)
                if tcfg.time_budget and step % tcfg.log_every == 0:
                    planned.assign(_replan(tcfg, step, steps_here, train_time, total_steps))
                    if progress is not None:
                        progress.replan(int(planned.numpy()))
                steps_here += 1
                plateau = bool(tcfg.validate_every) and step % tcfg.validate_every == 0 and (
                    validate(epoch, "validation"))
                if step % tcfg.checkpoint_every == 0 and not streak:  # unchanged since the streak
                    save(step)
                stop_reason = "plateau" if plateau else _stop_reason(tcfg, step, train_time,
                                                                     interrupted)
                if streak >= tcfg.max_nonfinite_steps:
                    stop_reason = "diverged"
                if workers > 1:  # every worker must stop at the same step
                    stop_reason = _agree_on_stop(strategy, stop_reason)
                if stop_reason:
                    break
            if stop_reason:
                break
            counters["epoch"].assign_add(1)
            counters["batch"].assign(0)
            plateau = not tcfg.validate_every and validate(epoch, "epoch")
            if not streak:
                save(int(counters["step"].numpy()))
            if plateau:
                stop_reason = "plateau"
                break
        stop_reason = stop_reason or "epochs"
    except tf.errors.OpError as error:
        if workers > 1:
            raise SeqvaeError(f"lost contact with another worker ({type(error).__name__}: "
                              f"{str(error).strip().splitlines()[0][:160]})") from None
        raise
    finally:
        if progress is not None:
            progress.close()
        for number, handler in previous_handlers.items():
            signal.signal(number, handler)
    step = int(counters["step"].numpy())
    writer.flush()
    if stop_reason == "diverged":
        latest = os.path.join(manager.directory, f"ckpt-{saved_step}") if saved_step >= 0 else None
        raise SeqvaeError(
            f"{run_dir}: training diverged: {streak} consecutive steps up to step {step} had a "
            f"NaN or infinite loss or gradient (loss {values.get('loss')}) and were skipped; "
            + (f"the last good checkpoint {latest} is intact" if latest else
               "no checkpoint was written") + "; lower train.learning_rate (or set "
            "train.clip_norm) and train into a new --out")
    if saved_step != step:
        save(step)
    if chief:
        files.append_jsonl(metrics_path, {"kind": "end", "step": step, "stop_reason": stop_reason,
                                          "time_budget": tcfg.time_budget,
                                          "skipped_steps": skipped})
    if chief and config.model.prior == "aggregate" and stop_reason != "interrupted":
        _fit_aggregate_prior(run_dir, config, source)
    if chief and tcfg.export_at_end and stop_reason != "interrupted":
        _export(run_dir)
    return {"run_dir": run_dir, "steps": step, "epochs": int(counters["epoch"].numpy()),
            "stop_reason": stop_reason, "last": values, "train_seconds": train_time,
            "wall_seconds": time.monotonic() - started, "sequences_per_second": seen / max(train_time, 1e-9),
            "padding_fraction": source.padding_fraction(),
            "skipped_invalid": source.skipped, "skipped_nonfinite": skipped,
            "replicas": strategy.num_replicas_in_sync,
            "chief": chief, "weights_checksum": weights_checksum(model)}


def _fit_aggregate_prior(run_dir: str, config: Config, source) -> None:
    """``model.prior=aggregate``: keeps the aggregate posterior of ``model.prior_encodings``
    training sequences as the run's prior (``seqvae.latent_prior.fit_aggregate``)."""
    from seqvae import inference, latent_prior

    started = time.monotonic()
    ids = source.sample_ids(config.model.prior_encodings, config.train.seed)
    mean, log_var = inference.encode_batches(run_lib.load_run(run_dir), ids)
    latent_prior.save(run_dir, latent_prior.fit_aggregate(mean, log_var, source.source,
                                                          config.model.prior_widen))
    print(f"seqvae: prior: the aggregate posterior of {len(ids):,} training sequences drawn at "
          f"random, each q(z|x) widened {config.model.prior_widen:g}x "
          f"({time.monotonic() - started:.0f} s); sample and evaluate draw z from it",
          file=sys.stderr, flush=True)


def _export(run_dir: str) -> None:
    from seqvae.export import export

    export(run_dir, os.path.join(run_dir, "saved_model"))


def _finished_reason(config: TrainConfig, counters: dict, metrics_path: str) -> str:
    """Why a restored run has nothing left to train under ``config`` ('' when it has): re-running
    the command of a finished run must not train one more step."""
    step = int(counters["step"].numpy())
    if int(counters["epoch"].numpy()) >= config.epochs:
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
        print(f"seqvae: {run_dir} already finished at step {step} ({reason}); nothing to train",
              file=sys.stderr, flush=True)
        if config.model.prior == "aggregate" and not os.path.exists(
                os.path.join(run_dir, "latent_prior.npz")):
            _fit_aggregate_prior(run_dir, config, source)
        if config.train.export_at_end and not os.path.isdir(os.path.join(run_dir, "saved_model")):
            _export(run_dir)
    return {"run_dir": run_dir, "steps": step, "epochs": int(counters["epoch"].numpy()),
            "stop_reason": reason, "already_finished": True, "last": {}, "train_seconds": 0.0,
            "wall_seconds": time.monotonic() - started, "sequences_per_second": 0.0,
            "padding_fraction": None, "skipped_invalid": 0, "skipped_nonfinite": 0,
            "replicas": 1, "chief": chief, "weights_checksum": weights_checksum(model)}


def _json_safe(values: dict) -> dict:
    """Metric values for a JSON line: NaN and infinities (invalid JSON) written as strings."""
    return {k: str(v) if isinstance(v, float) and not np.isfinite(v) else v
            for k, v in values.items()}


def weights_checksum(model: keras.Model) -> str:
    """A short hash of every weight's bytes: equal on workers that hold equal weights."""
    import hashlib

    digest = hashlib.sha256()
    for variable in model.weights:
        digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
    return digest.hexdigest()[:16]


_STOP_REASONS = ("", "plateau", "max_steps", "time_budget", "interrupted", "diverged")


def _replan(config: TrainConfig, step: int, steps_here: int, train_time: float,
            total_steps: int) -> int:
    """The run's length in steps when time bounds it: the steps done plus what the rest of the
    budget allows at this process's measured rate (after 20 warm-up steps; at most the epochs
    or max_steps plan), so the LR and KL schedules end where the budget ends."""
    if steps_here < 20 or train_time <= 0:
        return total_steps
    remaining = max(config.time_budget - train_time, 0.0) * steps_here / train_time
    return max(step + 1, min(total_steps, step + int(remaining)))


def describe_limits(config: Config, source, total_steps: int) -> str:
    """One line with what bounds the run (data, epochs and steps, time, early stopping) and the
    precision it computes in."""
    tcfg, dcfg = config.train, config.data
    parts = [f"{source.train_size:,} training and {source.validation_size:,} validation "
             f"sequences" + (f" (data.limit {dcfg.limit:,}"
                             + (", drawn at random)" if dcfg.subset == "random" else ")")
                             if dcfg.limit else ""),
             f"batch {tcfg.batch_size}", f"up to {tcfg.epochs} epochs = {total_steps:,} steps"]
    if tcfg.max_steps:
        parts.append(f"max_steps {tcfg.max_steps:,}")
    parts.append(f"time budget {tcfg.time_budget:g}s (schedules re-planned to fit)"
                 if tcfg.time_budget else "no time budget")
    parts.append(f"stops after {tcfg.patience} validations without improvement"
                 if tcfg.patience else "no early stopping")
    parts.append(describe_precision(tcfg.precision))
    if config.model.prior == "aggregate":
        parts.append(f"then keeps the aggregate posterior of {config.model.prior_encodings:,} "
                     f"training sequences as the prior (widened {config.model.prior_widen:g}x)")
    return "seqvae: training on " + ", ".join(parts)


def _agree_on_stop(strategy: tf.distribute.Strategy, reason: str) -> str:
    """The most urgent stop reason of any worker (an all-reduced vote), so all stop together."""
    vote = tf.one_hot(_STOP_REASONS.index(reason), len(_STOP_REASONS))
    votes = strategy.reduce("sum", strategy.run(lambda: tf.identity(vote)), axis=None).numpy()
    return _STOP_REASONS[int(np.flatnonzero(votes > 0).max())]


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _stop_reason(config: TrainConfig, step: int, train_time: float, interrupted: list) -> str:
    if interrupted:
        return "interrupted"
    if config.max_steps and step >= config.max_steps:
        return "max_steps"
    if config.time_budget and train_time >= config.time_budget:
        return "time_budget"
    return ""


def _validation_losses(validation_batches, eval_step) -> dict:
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


def _log_record(record: dict, metrics_path: str, writer) -> None:
    """One metrics.jsonl line and its TensorBoard scalars."""
    files.append_jsonl(metrics_path, _json_safe(record))
    with writer.as_default(step=record["step"]):
        for key, value in record.items():
            if key.startswith(("train_", "val_")):
                tf.summary.scalar(f"{record['kind']}/{key}", value)


