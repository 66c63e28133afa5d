"""Data preparation and the explicit custom training loop.

``train(config, run_dir, data)`` reads and encodes the data once, builds the model, and runs a
``tf.GradientTape`` step compiled with ``tf.function`` (optionally ``jit_compile=True``): Adam,
global-norm clipping, a learning-rate schedule, a KL-weight schedule, free bits, word dropout, a
validation pass each epoch. Everything that makes a step random is a pure function of
``(config.train.seed, step)`` and the data order a pure function of ``(seed, epoch)``, so a run
resumed from a checkpoint ends with exactly the weights of an uninterrupted run.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

from seqvae import data as data_lib
from seqvae import distribute as distribute_lib
from seqvae import losses, randomness
from seqvae import run as run_lib
from seqvae.config import Config, DataConfig, TrainConfig
from seqvae.errors import SeqvaeError
from seqvae.model import SequenceVAE, precision_policy
from seqvae.tokenizers import SelfiesTokenizer, UnknownTokenError, Vocabulary, get_tokenizer


@dataclass
class PreparedData:
    """Encoded sequences and their split; ``ids`` is int32 ``(N, max_len)``."""

    vocab: Vocabulary
    tokenizer: str
    texts: list[str]
    ids: np.ndarray
    lengths: np.ndarray
    train_index: np.ndarray
    val_index: np.ndarray
    source: str
    skipped: int = 0

    @property
    def max_len(self) -> int:
        return self.ids.shape[1]


def prepare_data(config: DataConfig, data=None, *, vocab: Vocabulary | None = None,
                 max_len: int = 0, seed: int = 0, strict: bool = False,
                 tokenizer: str | None = None) -> PreparedData:
    """Reads, checks, tokenizes and encodes sequences once.

    Args:
      config: the data section.
      data: a path, ``moses:SPLIT``, a list of strings or a numpy array; None = MOSES train.
      vocab: reuse this vocabulary (resume, encode) instead of fitting one.
      max_len: fixed length (tokens incl. ``<eos>``); else ``config.max_len`` or the longest.
      strict: fail on the first invalid SMILES instead of skipping invalid lines.
      tokenizer: override ``config.tokenizer`` (a run's stored tokenizer).
    """
    seqs = data_lib.read_sequences("moses:train" if data is None else data, config.column,
                                   config.limit)
    name = "word" if seqs.one_hot_classes else (tokenizer or config.tokenizer)
    keep = list(range(len(seqs.texts)))
    if name in ("smiles", "selfies") and not seqs.source.startswith("moses:"):
        keep = _drop_invalid_smiles(seqs, strict, name)
    texts = [seqs.texts[i] for i in keep]
    if name == "selfies":
        texts = [t if t.startswith("[") else SelfiesTokenizer.from_smiles(t) for t in texts]
    tok = get_tokenizer(name)
    token_lists = [tok.tokenize(t) for t in texts]
    if vocab is None:
        if seqs.one_hot_classes:
            vocab = Vocabulary([str(c) for c in range(seqs.one_hot_classes)])
        elif seqs.source.startswith("moses:") and config.limit:
            # A subset of MOSES still gets the vocabulary and length of the whole train split,
            # so the run can encode and evaluate on the MOSES test splits.
            vocab, max_len = _moses_vocabulary(tok, max_len or config.max_len)
        else:
            vocab = Vocabulary.fit(token_lists)
    max_len = max_len or config.max_len or max(len(t) for t in token_lists) + 1
    ids = np.zeros((len(texts), max_len), np.int32)
    lengths = np.zeros(len(texts), np.int32)
    for row, tokens in enumerate(token_lists):
        try:
            encoded = vocab.encode(tokens, unknown="error")
        except UnknownTokenError as error:
            raise SeqvaeError(f"{seqs.source}:{seqs.line_numbers[keep[row]]}: token {error.token!r} "
                              "is not in the run's vocabulary") from None
        if len(encoded) > max_len:
            raise SeqvaeError(f"{seqs.source}:{seqs.line_numbers[keep[row]]}: {len(encoded)} tokens "
                              f"with <eos>, longer than the model's maximum of {max_len}")
        ids[row, :len(encoded)] = encoded
        lengths[row] = len(encoded)
    train_index, val_index = data_lib.validation_split(len(texts), config.validation_fraction, seed)
    return PreparedData(vocab, name, texts, ids, lengths, train_index, val_index, seqs.source,
                        len(seqs.texts) - len(keep))


def _moses_vocabulary(tokenizer, max_len: int) -> tuple[Vocabulary, int]:
    token_lists = [tokenizer.tokenize(t) for t in data_lib.read_sequences("moses:train").texts]
    return Vocabulary.fit(token_lists), max_len or max(len(t) for t in token_lists) + 1


def _drop_invalid_smiles(seqs: data_lib.Sequences, strict: bool, name: str) -> list[int]:
    """Indices of the lines to keep; invalid SMILES are reported, skipped, or fatal (strict)."""
    candidates = [i for i, t in enumerate(seqs.texts) if not (name == "selfies" and t.startswith("["))]
    bad = [candidates[i] for i in data_lib.invalid_smiles([seqs.texts[i] for i in candidates])]
    if not bad:
        return list(range(len(seqs.texts)))
    lines = ", ".join(str(seqs.line_numbers[i]) for i in bad[:5])
    if strict:
        raise SeqvaeError(f"{seqs.source}:{seqs.line_numbers[bad[0]]}: invalid SMILES "
                          f"{seqs.texts[bad[0]][:60]!r} ({len(bad)} invalid lines in all: {lines})")
    if len(bad) == len(seqs.texts):
        raise SeqvaeError(f"{seqs.source}: none of the {len(bad)} lines is a valid SMILES "
                          f"(first: line {seqs.line_numbers[0]}); is this the right file or tokenizer?")
    print(f"seqvae: skipped {len(bad)} invalid SMILES in {seqs.source} (lines {lines}"
          f"{', ...' if len(bad) > 5 else ''}); use --strict to fail instead", file=sys.stderr)
    drop = set(bad)
    return [i for i in range(len(seqs.texts)) if i not in drop]


class _Schedule(keras.optimizers.schedules.LearningRateSchedule):
    """The pure ``losses.learning_rate`` as a Keras schedule of the optimizer's step counter."""

    def __init__(self, config: TrainConfig, total_steps: int):
        self.config, self.total_steps = config, total_steps

    def __call__(self, step):
        return losses.learning_rate(step, self.config, self.total_steps)

    def get_config(self):
        return {}


def compute_losses(model: SequenceVAE, ids: tf.Tensor, step: tf.Tensor, config: TrainConfig,
                   total_steps: int, training: bool = True,
                   shard: tuple[tf.Tensor, tf.Tensor, tf.Tensor] | None = None) -> dict[str, tf.Tensor]:
    """The training objective on one batch: ``recon + kl_weight * KL`` (MOSES convention).

    ``recon`` is the mean cross-entropy per real token; ``kl`` is summed over latent dimensions,
    averaged over the batch (``losses`` documents both). Randomness is seeded by ``step``.

    Args:
      shard: ``(row offset, global rows, global real tokens)`` when ``ids`` is one replica's
        slice of a global batch (``distribute.replica_shard``): every term is then this slice's
        share of the global-batch average (the shares sum to the global loss), and z's noise is
        the slice's rows of the global batch's noise.
    """
    seed = randomness.fold_in(randomness.as_seed(config.seed), step)
    rows = tf.shape(ids)[0]
    if shard is None:
        shard = (tf.constant(0), rows, tf.reduce_sum(tf.cast(tf.not_equal(ids, 0), tf.float32)))
    offset, global_rows, global_tokens = shard
    decoder_inputs = model.decoder_inputs(ids)
    if training and config.word_dropout > 0:
        decoder_inputs = losses.word_dropout(decoder_inputs, config.word_dropout,
                                             randomness.fold_in(seed, 2))
    noise = randomness.normal([global_rows, model.config.latent_dim], randomness.fold_in(seed, 0))
    out = model(ids, training=training, seed=seed, decoder_inputs=decoder_inputs,
                z_noise=noise[offset:offset + rows])
    recon = tf.reduce_sum(losses.sequence_cross_entropy(ids, out["logits"])) / tf.maximum(global_tokens, 1.0)
    global_rows = tf.cast(global_rows, tf.float32)
    kl_dims = losses.kl_per_dimension(out["z_mean"], out["z_log_var"]) * (
        tf.cast(rows, tf.float32) / global_rows)  # this slice's share of the batch mean
    kl = tf.reduce_sum(kl_dims)
    penalised_kl = kl
    if config.free_bits > 0:  # max(KL_d, free_bits) on the global per-dimension mean
        context = tf.distribute.get_replica_context()
        whole = kl_dims
        if context is not None and context.num_replicas_in_sync > 1:
            whole = context.all_reduce("sum", tf.stop_gradient(kl_dims))
        share = kl_dims / tf.maximum(tf.stop_gradient(whole), 1e-12)
        penalised_kl = tf.reduce_sum(tf.where(tf.stop_gradient(whole) >= config.free_bits, kl_dims,
                                              config.free_bits * tf.stop_gradient(share)))
    kl_weight = losses.kl_weight(step, config, total_steps)
    return {"loss": recon + kl_weight * penalised_kl, "recon": recon, "kl": kl,
            "kl_weight": tf.cast(kl_weight, tf.float32)}


def make_train_step(model: SequenceVAE, optimizer: keras.optimizers.Optimizer,
                    config: TrainConfig, total_steps: int, counters: dict[str, tf.Variable],
                    strategy: tf.distribute.Strategy | None = None):
    """Builds the compiled step ``per-replica ids (B, T) -> metrics``; it advances the counters.

    Advancing ``step``/``batch`` inside the compiled function keeps weights, optimizer and
    counters consistent: an interrupt lands before or after a whole step, never inside one.
    With several replicas the gradient-norm clip uses the global (all-reduced) gradient, and each
    replica's gradient is scaled by the same factor before the optimizer sums them.
    """
    strategy = strategy or tf.distribute.get_strategy()
    variables = model.trainable_variables

    def replica_step(ids):
        context = tf.distribute.get_replica_context()
        replicated = context is not None and context.num_replicas_in_sync > 1
        shard = distribute_lib.replica_shard(ids) if replicated else None
        scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        with tf.GradientTape() as tape:
            metrics = compute_losses(model, ids, counters["step"], config, total_steps, shard=shard)
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
        if scaling:  # LossScaleOptimizer.apply unscales (and skips steps with inf/nan) itself
            gradients = [g * scale for g in gradients]
        optimizer.apply(gradients, variables)
        metrics["grad_norm"] = norm / context.num_replicas_in_sync if replicated else norm
        return metrics

    if strategy.num_replicas_in_sync == 1:
        def train_step(ids):
            metrics = replica_step(ids)
            metrics["learning_rate"] = tf.cast(optimizer.learning_rate, tf.float32)
            counters["step"].assign_add(1)
            counters["batch"].assign_add(1)
            return metrics

        signature = [tf.TensorSpec([None, None], tf.int32)]  # one trace for every bucket shape
        return tf.function(train_step, jit_compile=config.jit_compile, input_signature=signature)

    compiled_replica_step = tf.function(replica_step, jit_compile=config.jit_compile or None)

    @tf.function
    def distributed_step(ids):
        per_replica = strategy.run(compiled_replica_step, args=(ids,))
        metrics = {k: strategy.reduce("sum", v, axis=None) for k, v in per_replica.items()}
        metrics["kl_weight"] = metrics["kl_weight"] / strategy.num_replicas_in_sync
        metrics["learning_rate"] = tf.cast(optimizer.learning_rate, tf.float32)
        counters["step"].assign_add(1)
        counters["batch"].assign_add(1)
        return metrics

    return distributed_step


class _Progress:
    """One status line: live (carriage return) on a terminal, every log_every steps otherwise."""

    def __init__(self, total_steps: int, every: int, time_budget: float = 0.0):
        self.total, self.every, self.budget = total_steps, every, time_budget
        self.live = sys.stderr.isatty()
        self.last = 0.0
        self.first_step = None

    def update(self, step: int, epoch: int, values: dict, rate: float, elapsed: float,
               force: bool = False) -> None:
        """``rate``: sequences/s; ``elapsed``: seconds of training in this process."""
        if self.first_step is None:
            self.first_step = step - 1
        now = time.monotonic()
        if not force and (self.live and now - self.last < 0.5 or not self.live and step % self.every):
            return
        self.last = now
        steps_per_second = (step - self.first_step) / max(elapsed, 1e-9)
        remaining = (self.total - step) / max(steps_per_second, 1e-9)
        if self.budget:
            remaining = min(remaining, max(self.budget - elapsed, 0.0))
        eta = time.strftime("%H:%M:%S", time.gmtime(remaining))
        line = (f"step {step}/{self.total} epoch {epoch + 1} loss {values['loss']:.4f} "
                f"recon {values['recon']:.4f} kl {values['kl']:.2f} kl_w {values['kl_weight']:.4f} "
                f"lr {values['learning_rate']:.2e} {rate:.0f} seq/s ETA {eta}")
        print(("\r" + line + "\x1b[K") if self.live else line, end="" if self.live else "\n",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.live:
            print(file=sys.stderr)


def _check_resume_config(stored: Config, given: Config, run_dir: str) -> None:
    for section in ("model", "data"):
        if getattr(stored, section) != getattr(given, section):
            raise SeqvaeError(f"{run_dir}: the {section} settings differ from the run's config.json; "
                              "resume with the run's own settings or train into a new --out")


def build_training(config: Config, max_len: int, vocab_size: int, total_steps: int,
                   strategy: tf.distribute.Strategy | None = None):
    """Model, optimizer (built, so a checkpoint can restore it) and counters, in the strategy."""
    keras.utils.set_random_seed(config.train.seed)
    with (strategy or tf.distribute.get_strategy()).scope():
        with precision_policy(config.train.precision):
            model = SequenceVAE(config.model, vocab_size, max_len).build_weights()
        optimizer = keras.optimizers.Adam(learning_rate=_Schedule(config.train, total_steps))
        if config.train.precision == "mixed_float16":  # float16 needs loss scaling
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
        counters = {name: tf.Variable(0, dtype=tf.int64, name=name, trainable=False)
                    for name in ("step", "epoch", "batch")}
    return model, optimizer, counters


def planned_steps(config: TrainConfig, steps_per_epoch: int) -> int:
    """Length of the run in steps (what cosine decay and the progress bar aim at)."""
    total = config.epochs * steps_per_epoch
    return min(total, config.max_steps) if config.max_steps else total


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
    if not distribute_lib.is_chief(strategy):
        # Other workers keep their own files (checkpoints included) in a temporary directory.
        import tempfile

        worker_dir = tempfile.mkdtemp(prefix="seqvae-worker-")
        if resume:
            import shutil

            shutil.rmtree(worker_dir)
            shutil.copytree(run_dir, worker_dir, ignore=shutil.ignore_patterns(".lock"))
        return _train_locked(config, worker_dir, data, resume, strict, strategy, chief=False)
    has_run = os.path.exists(os.path.join(run_dir, "run.json"))
    if resume and not has_run:
        raise SeqvaeError(f"{run_dir}: nothing to resume (not a seqvae run directory)")
    if not resume and has_run:
        raise SeqvaeError(f"{run_dir}: already holds a run; add --resume to continue it "
                          "or choose another --out")
    os.makedirs(run_dir, exist_ok=True)
    with run_lib.RunLock(run_dir):
        return _train_locked(config, run_dir, data, resume, strict, strategy, chief=True)


def _train_locked(config: Config, run_dir: str, data, resume: bool, strict: bool,
                  strategy: tf.distribute.Strategy, chief: bool) -> dict:
    started = time.monotonic()
    stored = run_lib.read_run_files(run_dir) if resume else None
    if stored is not None:
        _check_resume_config(stored.config, config, run_dir)
        if data is None and stored.info.get("data_source") not in (None, "list", "array"):
            data = stored.info["data_source"]
    source = _open_training_data(config, data, stored, strict or not config.data.skip_invalid,
                                 strategy)
    if not stored:
        run_lib.write_run_files(run_dir, config, source.vocab, {
            "max_len": source.max_len, "vocab_size": len(source.vocab),
            "tokenizer": source.tokenizer, "data_source": source.source,
            "train_size": source.train_size, "validation_size": source.validation_size})
    tcfg = config.train
    total_steps = planned_steps(tcfg, source.steps_per_epoch)
    model, optimizer, counters = build_training(config, source.max_len, len(source.vocab),
                                                total_steps, strategy)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, **counters)
    manager = tf.train.CheckpointManager(checkpoint, run_lib.checkpoint_dir(run_dir),
                                         max_to_keep=tcfg.keep_checkpoints)
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    if resume and manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
        run_lib.truncate_metrics(metrics_path, int(counters["step"].numpy()))
    train_step = make_train_step(model, optimizer, tcfg, total_steps, counters, strategy)
    eval_step = tf.function(
        lambda ids, step: compute_losses(model, ids, step, tcfg, total_steps, training=False),
        input_signature=[tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int64)])
    trackers = {name: keras.metrics.Mean(name=name) for name in ("loss", "recon", "kl", "kl_weight")}
    writer = tf.summary.create_file_writer(os.path.join(run_dir, "tensorboard"))
    progress = _Progress(total_steps, tcfg.log_every, tcfg.time_budget) if chief else None
    workers = distribute_lib.worker_count(strategy)

    interrupted = []
    previous_handler = None
    if hasattr(signal, "SIGINT") and _in_main_thread():
        previous_handler = signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    stop_reason, values, seen, train_time = "epochs", {}, 0, 0.0
    try:
        while int(counters["epoch"].numpy()) < tcfg.epochs:
            epoch = int(counters["epoch"].numpy())
            batches = source.epoch(epoch, int(counters["batch"].numpy()))
            for tracker in trackers.values():
                tracker.reset_state()
            for ids, rows in batches:
                tick = time.monotonic()
                out = train_step(ids)
                values = {k: float(v) for k, v in out.items()}
                train_time += time.monotonic() - tick
                seen += rows
                for name, tracker in trackers.items():
                    tracker.update_state(values[name])
                step = int(counters["step"].numpy())
                rate = seen / max(train_time, 1e-9)
                if chief:
                    progress.update(step, epoch, values, rate, train_time)
                    if step % tcfg.log_every == 0:
                        record = {"kind": "step", "step": step, "epoch": epoch, "seq_per_s": rate,
                                  **values}
                        run_lib.append_jsonl(metrics_path, record)
                        with writer.as_default(step=step):
                            for key, value in values.items():
                                tf.summary.scalar(f"train/{key}", value)
                if step % tcfg.checkpoint_every == 0:
                    manager.save(checkpoint_number=step)  # every worker: collective save
                stop_reason = _stop_reason(tcfg, step, train_time, interrupted)
                if workers > 1:  # every worker must stop at the same step
                    stop_reason = _agree_on_stop(strategy, stop_reason)
                if stop_reason:
                    break
            if stop_reason:
                break
            counters["epoch"].assign_add(1)
            counters["batch"].assign(0)
            if chief:
                _end_of_epoch(source.validation(), eval_step, counters, trackers, metrics_path,
                              writer, epoch)
            manager.save(checkpoint_number=int(counters["step"].numpy()))
        stop_reason = stop_reason or "epochs"
    except tf.errors.OpError as error:
        if workers > 1:
            raise SeqvaeError(f"lost contact with another worker ({type(error).__name__}: "
                              f"{str(error).strip().splitlines()[0][:160]})") from None
        raise
    finally:
        if progress is not None:
            progress.close()
        if previous_handler is not None:
            signal.signal(signal.SIGINT, previous_handler)
    step = int(counters["step"].numpy())
    if manager.latest_checkpoint is None or not manager.latest_checkpoint.endswith(f"-{step}"):
        manager.save(checkpoint_number=step)
    writer.flush()
    if chief and tcfg.export_at_end and stop_reason != "interrupted":
        from seqvae.export import export

        export(run_dir, os.path.join(run_dir, "saved_model"))
    return {"run_dir": run_dir, "steps": step, "epochs": int(counters["epoch"].numpy()),
            "stop_reason": stop_reason, "last": values, "train_seconds": train_time,
            "wall_seconds": time.monotonic() - started, "sequences_per_second": seen / max(train_time, 1e-9),
            "padding_fraction": source.padding_fraction(),
            "skipped_invalid": source.skipped, "replicas": strategy.num_replicas_in_sync,
            "chief": chief, "weights_checksum": weights_checksum(model)}


def weights_checksum(model: keras.Model) -> str:
    """A short hash of every weight's bytes: equal on workers that hold equal weights."""
    import hashlib

    digest = hashlib.sha256()
    for variable in model.weights:
        digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
    return digest.hexdigest()[:16]


_STOP_REASONS = ("", "max_steps", "time_budget", "interrupted")


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


def _end_of_epoch(validation_batches, eval_step, counters, trackers, metrics_path, writer,
                  epoch: int) -> None:
    """Validation pass (fixed seeds, so it is comparable across epochs) and the epoch record."""
    record = {"kind": "epoch", "epoch": epoch, "step": int(counters["step"].numpy()),
              **{f"train_{k}": float(t.result()) for k, t in trackers.items()}}
    sums, count = {}, 0
    for i, ids in enumerate(validation_batches):
        out = eval_step(ids, tf.constant(10**9 + i, tf.int64))
        for key in ("loss", "recon", "kl"):
            sums[key] = sums.get(key, 0.0) + float(out[key]) * int(ids.shape[0])
        count += int(ids.shape[0])
    if count:
        record.update({f"val_{k}": v / count for k, v in sums.items()})
    run_lib.append_jsonl(metrics_path, record)
    with writer.as_default(step=record["step"]):
        for key, value in record.items():
            if key.startswith(("train_", "val_")):
                tf.summary.scalar(f"epoch/{key}", value)


class _InMemoryData:
    """Sequences encoded once into arrays; batches from ``data.batch_plan``."""

    def __init__(self, prepared: PreparedData, config: Config, strategy):
        self.prepared, self.config, self.strategy = prepared, config, strategy
        self.vocab, self.max_len, self.tokenizer = prepared.vocab, prepared.max_len, prepared.tokenizer
        self.source, self.skipped = prepared.source, prepared.skipped
        self.train_size, self.validation_size = len(prepared.train_index), len(prepared.val_index)
        self.lengths = prepared.lengths[prepared.train_index]
        self.steps_per_epoch = math.ceil(self.train_size / config.train.batch_size)
        self.fractions = []

    def epoch(self, epoch: int, skip: int):
        """``(per-replica ids, global rows)`` for the rest of one epoch."""
        dcfg, tcfg, width = self.config.data, self.config.train, self.config.bucket_width()
        plan = data_lib.batch_plan(self.lengths, tcfg.batch_size, tcfg.seed, epoch, dcfg.bucket)
        self.fractions.append(data_lib.padding_fraction(self.lengths, plan, width, self.max_len))
        batches = distribute_lib.distributed_batches(
            self.strategy, self.prepared.ids[self.prepared.train_index], self.lengths, plan[skip:],
            width)
        return zip(batches, (len(batch) for batch in plan[skip:]))

    def validation(self):
        prepared, dcfg = self.prepared, self.config.data
        lengths = prepared.lengths[prepared.val_index]
        plan = data_lib.batch_plan(lengths, self.config.train.batch_size, self.config.train.seed, 0,
                                   dcfg.bucket)
        return data_lib.make_dataset(prepared.ids[prepared.val_index], lengths, plan,
                                     self.config.bucket_width())

    def padding_fraction(self) -> float | None:
        return float(np.mean(self.fractions)) if self.fractions else None


class _StreamedData:
    """A streamed corpus (``seqvae.streaming``): nothing is held but the vocabulary."""

    def __init__(self, stream, source: str):
        self.stream, self.source, self.skipped = stream, source, 0
        self.vocab, self.max_len, self.tokenizer = stream.vocab, stream.max_len, stream.tokenizer
        self.steps_per_epoch = stream.steps_per_epoch
        self.train_size = round(stream.lines * (1 - stream.validation_fraction))
        self.validation_size = stream.lines - self.train_size
        self.real = self.computed = 0

    def epoch(self, epoch: int, skip: int):
        for ids in self.stream.batches(epoch, skip):
            self.real += int(tf.math.count_nonzero(ids))
            self.computed += int(tf.size(ids))
            yield ids, int(ids.shape[0])

    def validation(self):
        return self.stream.batches(0, validation=True)

    def padding_fraction(self) -> float | None:
        return 1.0 - self.real / self.computed if self.computed else None


def _open_training_data(config: Config, data, stored, strict: bool, strategy):
    """The in-memory or streamed training data of a run (resumed runs reuse their vocabulary)."""
    if not config.data.streaming:
        prepared = prepare_data(config.data, data, vocab=stored.vocab if stored else None,
                                max_len=stored.max_len if stored else 0, seed=config.train.seed,
                                strict=strict, tokenizer=stored.info["tokenizer"] if stored else None)
        return _InMemoryData(prepared, config, strategy)
    from seqvae import streaming

    if strategy.num_replicas_in_sync > 1:
        raise SeqvaeError("streaming data runs with the default strategy only for now")
    if data is None or not isinstance(data, str):
        raise SeqvaeError("streaming needs text files: give a path or glob pattern as DATA")
    files = streaming.expand_sources(data)
    tokenizer = stored.info["tokenizer"] if stored else config.data.tokenizer
    scan = streaming.scan_corpus(files, tokenizer, stored.vocab if stored else None)
    max_len = stored.max_len if stored else (config.data.max_len or scan["max_len"])
    stream = streaming.StreamingData(files, scan["vocab"], tokenizer, max_len, scan["lines"],
                                     config.train.batch_size, config.train.seed,
                                     config.data.validation_fraction, config.bucket_width())
    return _StreamedData(stream, data)
