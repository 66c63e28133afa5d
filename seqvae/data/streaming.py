"""Training data that does not fit in memory: text shards streamed through ``tf.data``.

``seqvae train 'shards/*.smi.gz' --stream`` reads one or many text files (glob patterns, plain or
gzipped; first whitespace-separated column, ``#`` comments skipped) without loading the corpus:

1. one streaming pass in Python fits the vocabulary and finds the longest sequence and the line
   counts (or a given ``vocab.json`` is used) — memory holds only token counts;
2. every epoch, a ``tf.data`` pipeline reads the lines again, splits off validation lines by a
   hash of the line (the same split every epoch), tokenizes *in the graph* (the same regex as
   ``SmilesTokenizer``), shuffles in a seeded buffer (seed, epoch), batches sequences of similar
   length (``bucket_by_sequence_length``) and prefetches.

The data order is a pure function of (files, seed, epoch), so resuming skips the batches already
done and continues exactly.
"""

from __future__ import annotations

import glob
import gzip
import io
import os

import numpy as np
import tensorflow as tf

from seqvae.data.graph_tokenizers import graph_tokenize, lookup_table
from seqvae.data.tokenizers import get_tokenizer
from seqvae.data.vocabulary import PAD_ID, Vocabulary
from seqvae.errors import SeqvaeError

SHUFFLE_BUFFER = 20_000
HASH_BUCKETS = 10_000


def expand_sources(sources) -> list[str]:
    """Glob patterns or paths (a string, possibly comma-separated, or a list) -> sorted files."""
    if isinstance(sources, str):
        sources = [s for s in sources.split(",") if s]
    files = []
    for pattern in sources:
        matched = sorted(glob.glob(os.path.expanduser(pattern)))
        if not matched:
            raise SeqvaeError(f"{pattern}: no file matches")
        files.extend(matched)
    for path in files:
        if os.path.isdir(path):
            raise SeqvaeError(f"{path}: is a directory, expected a text file")
        if path.endswith((".csv", ".tsv", ".npy", ".csv.gz", ".tsv.gz")):
            raise SeqvaeError(f"{path}: streaming reads text files (.smi/.txt, optionally .gz); "
                              "convert tables to one sequence per line")
    return files


def _lines(path: str):
    raw = gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")
    with io.TextIOWrapper(raw, encoding="utf-8", newline="") as handle:
        number = 0
        try:
            for number, line in enumerate(handle, start=1):
                fields = line.split()
                if fields and not fields[0].startswith("#"):
                    yield fields[0]
        except UnicodeDecodeError:
            raise SeqvaeError(f"{path}:{number + 1}: not UTF-8 text") from None
        except (OSError, EOFError) as error:
            raise SeqvaeError(f"{path}: cannot read ({error})") from None


def is_validation(text: str, fraction: float) -> bool:
    """The same split as the pipeline's: ``to_hash_bucket_fast(line) < fraction * buckets``."""
    bucket = int(tf.strings.to_hash_bucket_fast(text, HASH_BUCKETS).numpy())
    return bucket < fraction * HASH_BUCKETS


def scan_corpus(files: list[str], tokenizer: str, vocab: Vocabulary | None = None) -> dict:
    """One streaming pass: vocabulary (unless given), longest sequence and line count."""
    tok = get_tokenizer(tokenizer)
    stats = {"longest": 0, "lines": 0}

    def token_lists():
        for path in files:
            for text in _lines(path):
                tokens = tok.tokenize(text)
                stats["longest"] = max(stats["longest"], len(tokens))
                stats["lines"] += 1
                yield tokens

    if vocab is None:
        vocab = Vocabulary.fit(token_lists())  # the same ordering as in-memory runs
    else:
        for _ in token_lists():
            pass
    if not stats["lines"]:
        raise SeqvaeError(f"{files[0]}: no sequences found")
    return {"vocab": vocab, "max_len": stats["longest"] + 1, "lines": stats["lines"]}


class StreamingData:
    """The training data of a streamed corpus (see the module docstring)."""

    def __init__(self, files: list[str], vocab: Vocabulary, tokenizer: str, max_len: int,
                 lines: int, batch_size: int, seed: int, validation_fraction: float,
                 bucket_width: int = 8):
        self.files, self.vocab, self.tokenizer = files, vocab, tokenizer
        self.max_len, self.lines, self.batch_size = max_len, lines, batch_size
        self.seed, self.validation_fraction, self.bucket_width = seed, validation_fraction, bucket_width
        self.table = lookup_table(vocab)

    def _lines_dataset(self, validation: bool) -> tf.data.Dataset:
        datasets = [tf.data.TextLineDataset(path, compression_type="GZIP" if path.endswith(".gz") else "")
                    for path in self.files]
        lines = datasets[0]
        for more in datasets[1:]:
            lines = lines.concatenate(more)
        lines = lines.map(lambda line: tf.strings.split(tf.strings.strip(line), maxsplit=1))
        lines = lines.filter(lambda fields: tf.size(fields) > 0)
        lines = lines.map(lambda fields: fields[0])
        lines = lines.filter(lambda text: ~tf.strings.regex_full_match(text, "#.*"))
        threshold = int(self.validation_fraction * HASH_BUCKETS)
        in_validation = lambda text: tf.strings.to_hash_bucket_fast(text, HASH_BUCKETS) < threshold
        return lines.filter(in_validation if validation else lambda text: ~in_validation(text))

    def _encode(self, text: tf.Tensor) -> tf.Tensor:
        tokens = graph_tokenize(tf.reshape(text, [1]), self.tokenizer)
        ids = tf.cast(self.table.lookup(tokens.flat_values), tf.int32)
        return tf.concat([ids, [self.vocab.eos_id]], axis=0)

    def batches(self, epoch: int, skip: int = 0, validation: bool = False) -> tf.data.Dataset:
        """int32 batches ``(B, T)`` of one epoch (``validation``: the held-out lines, in order)."""
        ids = self._lines_dataset(validation).map(self._encode, num_parallel_calls=tf.data.AUTOTUNE,
                                                  deterministic=True)
        ids = ids.filter(lambda seq: tf.size(seq) <= self.max_len)  # longer than the model: skipped
        if not validation:
            ids = ids.shuffle(SHUFFLE_BUFFER, seed=self.seed * 1_000_003 + epoch,
                              reshuffle_each_iteration=False)
        boundaries = list(range(self.bucket_width + 1, self.max_len + 1, self.bucket_width))
        batched = ids.bucket_by_sequence_length(
            lambda seq: tf.size(seq), bucket_boundaries=boundaries,
            bucket_batch_sizes=[self.batch_size] * (len(boundaries) + 1), padding_values=PAD_ID)
        return batched.skip(skip).prefetch(tf.data.AUTOTUNE)

    def shuffled_sequences(self, count: int) -> np.ndarray:
        """int32 ``(<= count, max_len)``: the first ``count`` training sequences of the first
        epoch's shuffled order (before bucketing by length), padded."""
        ids = self._lines_dataset(False).map(self._encode)
        ids = ids.filter(lambda seq: tf.size(seq) <= self.max_len).shuffle(
            SHUFFLE_BUFFER, seed=self.seed * 1_000_003, reshuffle_each_iteration=False)
        rows = [seq for seq in ids.take(count).padded_batch(
            1024, padded_shapes=[self.max_len], padding_values=PAD_ID).as_numpy_iterator()]
        return (np.concatenate(rows) if rows else np.zeros((0, self.max_len))).astype(np.int32)

    @property
    def steps_per_epoch(self) -> int:
        return max(1, round(self.lines * (1 - self.validation_fraction) / self.batch_size))
