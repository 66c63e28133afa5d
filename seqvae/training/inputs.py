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


class InMemoryData:
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
        plan = batching.batch_plan(self.lengths, tcfg.batch_size, tcfg.seed, epoch, dcfg.bucket)
        self.fractions.append(batching.padding_fraction(self.lengths, plan, width, self.max_len))
        batches = distribute_lib.distributed_batches(
            self.strategy, self.prepared.ids[self.prepared.train_index], self.lengths, plan[skip:],
            width)
        return zip(batches, (len(batch) for batch in plan[skip:]))

    def validation(self):
        prepared, dcfg = self.prepared, self.config.data
        lengths = prepared.lengths[prepared.val_index]
        plan = batching.batch_plan(lengths, self.config.train.batch_size, self.config.train.seed, 0,
                                   dcfg.bucket)
        return batching.make_dataset(prepared.ids[prepared.val_index], lengths, plan,
                                     self.config.bucket_width())

    def padding_fraction(self) -> float | None:
        return float(np.mean(self.fractions)) if self.fractions else None


class StreamedData:
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


def open_training_data(config: Config, data, stored, strict: bool, strategy):
    """The in-memory or streamed training data of a run (resumed runs reuse their vocabulary)."""
    if not config.data.streaming:
        prepared = prepare_data(config.data, data, codec=stored.codec if stored else None,
                                seed=config.train.seed, strict=strict)
        return InMemoryData(prepared, config, strategy)
    from seqvae.data import streaming

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
    return StreamedData(stream, data)
