"""Running the training loop on ``tf.distribute``: strategies, input sharding, global batches.

One global batch (the rows of one entry of ``data.batch_plan``) is split into contiguous slices,
one per replica (``numpy.array_split`` order). Inside a replica, ``replica_shard`` tells where the
slice sits in the global batch, so the loss can be averaged over the *global* batch and the
reparametrization noise can be the global batch's noise rows: with dropout and word dropout off,
N replicas compute exactly the loss and update of one device on the same global batch.

Multi-worker training reads ``TF_CONFIG``; the chief writes the real checkpoints and logs, the
other workers write theirs to temporary directories (the documented pattern), and collective
operations time out (``collective_timeout``) so a dead worker makes the others fail, not hang.
"""

from __future__ import annotations

import json
import os
from typing import Iterator

import numpy as np
import tensorflow as tf

from seqvae.data.vocabulary import PAD_ID
from seqvae.errors import SeqvaeError

STRATEGIES = ("default", "mirrored", "multi-worker")


def make_strategy(name: str, collective_timeout: float | None = None) -> tf.distribute.Strategy:
    """``default`` (one device), ``mirrored`` (all local devices) or ``multi-worker``.

    ``collective_timeout`` (seconds; default ``$SEQVAE_COLLECTIVE_TIMEOUT`` or 300) bounds how
    long a worker waits for the others in a collective operation.
    """
    if collective_timeout is None:
        collective_timeout = float(os.environ.get("SEQVAE_COLLECTIVE_TIMEOUT", "300"))
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi-worker":
        if "TF_CONFIG" not in os.environ:
            raise SeqvaeError("the multi-worker strategy needs TF_CONFIG (cluster and task) in the environment")
        try:
            json.loads(os.environ["TF_CONFIG"])
        except ValueError:
            raise SeqvaeError("TF_CONFIG is not valid JSON") from None
        options = tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=collective_timeout)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    raise SeqvaeError(f"unknown strategy {name!r} (choose {', '.join(STRATEGIES)})")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True for the worker that writes checkpoints, logs and exports."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return not has_chief and resolver.task_type == "worker" and resolver.task_id == 0


def worker_count(strategy: tf.distribute.Strategy) -> int:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return 1
    spec = resolver.cluster_spec().as_dict()
    return len(spec.get("chief", [])) + len(spec.get("worker", []))


def replica_slices(batch: np.ndarray, replicas: int) -> list[np.ndarray]:
    """Contiguous slices of a global batch's row indices, one per replica."""
    return np.array_split(batch, replicas)


def distributed_batches(strategy: tf.distribute.Strategy, ids: np.ndarray, lengths: np.ndarray,
                        plan: list[np.ndarray], bucket_width: int,
                        targets: np.ndarray | None = None) -> Iterator:
    """Per-replica batches for ``strategy.run``; each replica pads only its own slice.

    The default strategy gets the plain prefetched pipeline of ``data.make_dataset`` (with
    property ``targets``, the only one that carries them).
    """
    from seqvae.data.batching import make_dataset, padded_length

    replicas = strategy.num_replicas_in_sync
    if replicas == 1:
        return iter(make_dataset(ids, lengths, plan, bucket_width, targets))
    if any(len(batch) < replicas for batch in plan):
        plan = [batch for batch in plan if len(batch) >= replicas]  # a replica would get nothing
    max_len = ids.shape[1]

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        local = replicas // context.num_input_pipelines
        first = context.input_pipeline_id * local

        def generate():
            for batch in plan:
                for part in replica_slices(batch, replicas)[first:first + local]:
                    yield ids[part, :padded_length(lengths[part], bucket_width, max_len)]

        return tf.data.Dataset.from_generator(
            generate, output_signature=tf.TensorSpec([None, None], tf.int32)).prefetch(2)

    options = tf.distribute.InputOptions(experimental_fetch_to_device=False)
    return iter(strategy.distribute_datasets_from_function(dataset_fn, options))


def replica_shard(ids: tf.Tensor, pad_id: int = PAD_ID) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Inside ``strategy.run``: ``(row offset, global rows, global real tokens)`` of this slice."""
    context = tf.distribute.get_replica_context()
    rows = tf.shape(ids)[0]
    tokens = tf.reduce_sum(tf.cast(tf.not_equal(ids, pad_id), tf.float32))
    if context is None or context.num_replicas_in_sync == 1:
        return tf.constant(0), rows, tokens
    all_rows = context.all_gather(tf.reshape(rows, [1]), axis=0)
    offset = tf.reduce_sum(all_rows[:context.replica_id_in_sync_group])
    return offset, tf.reduce_sum(all_rows), context.all_reduce("sum", tokens)
