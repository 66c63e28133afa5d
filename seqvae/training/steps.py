"""The training step and what it updates: the model, the optimizer and the run's counters
(``build_training``), the compiled step ``make_train_step`` (one replica or several), the
validation step, and the run's planned length in steps."""

from __future__ import annotations

import hashlib

import keras
import numpy as np
import tensorflow as tf

from seqvae.config import Config, TrainConfig
from seqvae.model.precision import resolve_precision
from seqvae.model.vae import SequenceVAE, precision_policy
from seqvae.training import distribute as distribute_lib
from seqvae.training.objective import compute_losses
from seqvae.training.schedules import LearningRateSchedule

UNBOUNDED_STEPS = 10**12  # the plan of a run that no epoch or step count bounds (time does)


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


def make_eval_step(model: SequenceVAE, config: TrainConfig, planned, grammar=None,
                   max_len: int = 0, num_properties: int = 0):
    """The compiled validation step ``(ids (B, T), step[, targets (B, P)]) -> losses``: the
    training objective without dropout, at a fixed seed per batch (``step``)."""
    signature = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int64)]
    if num_properties:
        signature.append(tf.TensorSpec([None, num_properties], tf.float32))
    return tf.function(
        lambda ids, step, targets=None: compute_losses(
            model, ids, step, config, planned, training=False, grammar=grammar,
            max_len=max_len, targets=targets),
        input_signature=signature, autograph=False)


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
    """Length of the run in steps (what cosine decay and the progress bar aim at): its epochs'
    steps, at most ``max_steps``; ``epochs`` 0 (no epoch limit) leaves ``max_steps``, or for a run
    bounded by time alone ``UNBOUNDED_STEPS`` until the time budget re-plans it."""
    total = config.epochs * steps_per_epoch if config.epochs else UNBOUNDED_STEPS
    return min(total, config.max_steps) if config.max_steps else total


def softmax_grammar(config: Config, tokens, tokenizer: str):
    """The grammar of ``train.grammar_softmax``: None when it is off or the run is not SMILES
    (only SMILES runs have a grammar; the presets' recipe turns it on for every run)."""
    if not config.train.grammar_softmax:
        return None
    from seqvae.model.grammar import grammar_for

    return grammar_for(tokens, tokenizer)


def weights_checksum(model: keras.Model) -> str:
    """A short hash of every weight's bytes: equal on workers that hold equal weights."""
    digest = hashlib.sha256()
    for variable in model.weights:
        digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
    return digest.hexdigest()[:16]
