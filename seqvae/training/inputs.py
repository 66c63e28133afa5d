"""The training data as the loop sees it: an in-memory corpus encoded once, or a streamed one,
each giving the batches of an epoch from a position (exact resume) and a validation pass."""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from seqvae.config import Config
from seqvae.data import batching
from seqvae.data.preparation import PreparedData, prepare_data
from seqvae.errors import SeqvaeError
from seqvae.training import distribute as distribute_lib
from seqvae.messages import note


class InMemoryData:
    """Sequences encoded once into arrays; batches from ``data.batch_plan``.

    ``targets``: float32 ``(N, P)`` standardised properties of every row (``data.properties``);
    batches are then ``(ids, targets)`` pairs.
    """

    def __init__(self, prepared: PreparedData, config: Config, strategy,
                 targets: np.ndarray | None = None, properties: dict | None = None):
        self.prepared, self.config, self.strategy = prepared, config, strategy
        self.targets, self.properties = targets, properties
        self.vocab, self.max_len, self.tokenizer = prepared.vocab, prepared.max_len, prepared.tokenizer
        self.source, self.skipped = prepared.source, prepared.skipped
        self.train_size, self.validation_size = len(prepared.train_index), len(prepared.val_index)
        self.lengths = prepared.lengths[prepared.train_index]
        self.steps_per_epoch = math.ceil(self.train_size / config.train.batch_size)
        self.fractions = []

    def epoch(self, epoch: int, skip: int):
        """``(per-replica ids, global rows)`` for the rest of one epoch."""
        dcfg, tcfg, width = self.config.data, self.config.train, self.config.bucket_width()
        plan = batching.batch_plan(self.lengths, tcfg.batch_size, tcfg.seed, epoch, dcfg.bucket)
        self.fractions.append(batching.padding_fraction(self.lengths, plan, width, self.max_len))
        index = self.prepared.train_index
        batches = distribute_lib.distributed_batches(
            self.strategy, self.prepared.ids[index], self.lengths, plan[skip:], width,
            None if self.targets is None else self.targets[index])
        return zip(batches, (len(batch) for batch in plan[skip:]))

    def validation(self):
        prepared, dcfg = self.prepared, self.config.data
        lengths = prepared.lengths[prepared.val_index]
        plan = batching.batch_plan(lengths, self.config.train.batch_size, self.config.train.seed, 0,
                                   dcfg.bucket)
        return batching.make_dataset(prepared.ids[prepared.val_index], lengths, plan,
                                     self.config.bucket_width(),
                                     None if self.targets is None else self.targets[prepared.val_index])

    def padding_fraction(self) -> float | None:
        return float(np.mean(self.fractions)) if self.fractions else None

    def sample_ids(self, count: int, seed: int) -> np.ndarray:
        """int32 ``(min(count, train_size), max_len)`` ids of training rows drawn at random."""
        index = self.prepared.train_index
        if count < len(index):
            index = np.sort(np.random.default_rng(seed).choice(index, count, replace=False))
        return self.prepared.ids[index]


class StreamedData:
    """A streamed corpus (``seqvae.streaming``): nothing is held but the vocabulary."""

    properties = None  # streamed corpora carry no property targets

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

    def sample_ids(self, count: int, seed: int) -> np.ndarray:
        """int32 ``(<= count, max_len)``: the first ``count`` training sequences of the first
        epoch's shuffled order (``seed`` unused: the stream's own seed orders it)."""
        return self.stream.shuffled_sequences(count)


def open_training_data(config: Config, data, stored, strict: bool, strategy,
                       run_dir: str | None = None, codec=None):
    """The in-memory or streamed training data of a run (resumed runs reuse their vocabulary,
    a new run is given one with ``codec``, in-memory data only).

    With ``data.properties`` the properties of every row are computed once (cached in
    ``RUN_DIR/properties/training.npz``) and standardised with the training split's mean and
    standard deviation (resumed runs reuse the stored ones).
    """
    if config.data.properties and (config.data.streaming or strategy.num_replicas_in_sync > 1):
        raise SeqvaeError("data.properties (a jointly trained property head) needs in-memory data "
                          "and the default strategy; fit a head afterwards with "
                          "'seqvae fit-properties' instead")
    if not config.data.streaming:
        prepared = prepare_data(config.data, data, codec=stored.codec if stored else codec,
                                seed=config.train.seed, strict=strict)
        if not config.data.properties:
            return InMemoryData(prepared, config, strategy)
        targets, properties = property_targets(prepared, config, data, run_dir,
                                               stored.info.get("properties") if stored else None)
        return InMemoryData(prepared, config, strategy, targets, properties)
    from seqvae.data import streaming

    if strategy.num_replicas_in_sync > 1:
        raise SeqvaeError("streaming data runs with the default strategy only for now")
    if codec is not None and not stored:
        raise SeqvaeError("a given vocabulary (seqvae finetune) needs in-memory data: "
                          "data.streaming=false")
    if data is None or not isinstance(data, str):
        raise SeqvaeError("streaming needs text files: give a path or glob pattern as DATA")
    files = streaming.expand_sources(data)
    tokenizer = stored.info["tokenizer"] if stored else config.data.tokenizer
    scan = streaming.scan_corpus(files, tokenizer, stored.vocab if stored else None)
    max_len = stored.max_len if stored else (config.data.max_len or scan["max_len"])
    stream = streaming.StreamingData(files, scan["vocab"], tokenizer, max_len, scan["lines"],
                                     config.train.batch_size, config.train.seed,
                                     config.data.validation_fraction, config.bucket_width())
    return StreamedData(stream, data)


def property_targets(prepared: PreparedData, config: Config, data, run_dir: str | None,
                     stored: dict | None = None) -> tuple[np.ndarray, dict]:
    """Standardised float32 ``(N, P)`` targets of the prepared rows, and ``{"names", "mean",
    "std"}`` for run.json. RDKit properties are computed on the rows' molecules; ``col:``
    properties are read from the source's columns, matched by line."""
    import os

    from seqvae.data import properties as props
    from seqvae.files import atomic_path

    names = props.parse_property_names(config.data.properties)
    cache = os.path.join(run_dir, "properties", "training.npz") if run_dir else None
    values = None
    if cache and os.path.exists(cache):
        with np.load(cache, allow_pickle=False) as saved:
            if saved["names"].tolist() == list(names) and len(saved["values"]) == len(prepared.ids):
                values = saved["values"]
    if values is None:
        note(f"seqvae: computing {', '.join(names)} for {len(prepared.ids)} molecules "
              "(once; cached in the run directory)")
        values = np.full((len(prepared.ids), len(names)), np.nan)
        computed = [j for j, name in enumerate(names) if not name.startswith(props.COLUMN_PREFIX)]
        if computed:
            values[:, computed] = props.rdkit_properties(
                prepared.texts, [names[j] for j in computed],
                progress=lambda line: note(f"seqvae: {line}"))
        columns = [j for j, name in enumerate(names) if name.startswith(props.COLUMN_PREFIX)]
        if columns:
            table = props.read_property_table(data, [names[j] for j in columns],
                                              config.data.column, config.data.lines_read)
            by_line = dict(zip(table.line_numbers, table.values))
            values[:, columns] = np.stack([by_line[line] for line in prepared.line_numbers])
        if cache:
            with atomic_path(cache, suffix=".npz") as tmp:
                np.savez(tmp, names=np.array(names), values=values)
    unknown = int(np.isnan(values).any(axis=1).sum())
    if unknown:
        note(f"seqvae: {unknown} of {len(values)} training rows lack a property value (empty "
              "cell); the head's loss skips those values")
    if stored:
        mean, std = np.array(stored["mean"]), np.array(stored["std"])
    else:
        mean, std = props.standardisation(values[prepared.train_index])
    if np.isnan(mean).any():
        missing = [names[j] for j in np.flatnonzero(np.isnan(mean))]
        raise SeqvaeError(f"data.properties: no training row has a value for {', '.join(missing)}")
    targets = ((values - mean) / std).astype(np.float32)
    return targets, {"names": list(names), "mean": mean.tolist(), "std": std.tolist()}
