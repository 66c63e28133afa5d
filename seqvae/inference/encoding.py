"""Encoding texts into latent means and log-variances: in memory, or streamed into .npy files."""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from typing import Callable

import numpy as np
import tensorflow as tf

from seqvae.data import sources
from seqvae.data.moses import is_moses
from seqvae.data.preparation import EncodedTexts, encode_texts
from seqvae.errors import SeqvaeError
from seqvae.inference import compiled as compiled_lib
from seqvae.run import Run
from seqvae.messages import note


def encode_ids(run: Run, data, strict: bool = False, skip: bool = False,
               limit: int = 0) -> EncodedTexts:
    """Reads ``data`` (path, ``moses:SPLIT`` or list; its first ``limit`` lines, 0 = all) and
    encodes it with the run's codec.

    Invalid SMILES are left out with a note on stderr (``strict``: an error); unknown tokens and
    over-long sequences are errors naming the line, or left out too with ``skip``.
    """
    seqs = sources.read_sequences(data, run.config.data.column, limit=limit)
    policy = "skip" if skip else "raise" if strict else "skip_invalid"
    encoded = encode_texts(run.codec, seqs.texts, on_error=policy, source=seqs.source,
                           line_numbers=seqs.line_numbers,
                           check_molecules=not is_moses(seqs.source))
    if encoded.problems and not skip:
        lines = ", ".join(message.split(": ", 1)[0] for message in encoded.messages[:5])
        note(f"seqvae: skipped {len(encoded.problems)} invalid SMILES ({lines}"
              f"{', ...' if len(encoded.problems) > 5 else ''}); use --strict to fail instead")
    if not len(encoded.ids):
        raise SeqvaeError(f"{seqs.source}: nothing to encode (no line can be encoded by this run)")
    return encoded


def encode_batches(run: Run, ids: np.ndarray, batch_size: int = 1000):
    """``(z_mean, z_log_var)``, float32 ``(N, latent_dim)``, of encoded ids ``(N, T)``."""
    encoder = compiled_lib.compiled_encoder(run)
    means, log_vars = [], []
    for start in range(0, len(ids), batch_size):
        mean, log_var = encoder(tf.constant(ids[start:start + batch_size]))
        means.append(mean.numpy())
        log_vars.append(log_var.numpy())
    return np.concatenate(means).astype(np.float32), np.concatenate(log_vars).astype(np.float32)


def encode_writable(run: Run, texts, batch_size: int = 1000, source: str = "input"
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(kept int (K,), z_mean (K, L), z_log_var (K, L))``: the posteriors of the ``texts`` the
    run can encode (the input row of each in ``kept``); the others left out without a word
    (what a search decodes and encodes back, or a user's molecules checked elsewhere);
    ``source`` names the texts in the encoder's notes."""
    encoded = encode_texts(run.codec, list(texts), on_error="skip", check_molecules=False,
                           source=source)
    if not len(encoded.ids):
        empty = np.zeros((0, run.config.model.latent_dim), np.float32)
        return np.zeros(0, np.int64), empty, empty
    means, log_vars = encode_batches(run, encoded.ids, batch_size)
    return np.asarray(encoded.kept, np.int64), means, log_vars


def encode(run: Run, data, strict: bool = False, batch_size: int = 1000):
    """Encodes sequences -> ``(z_mean, z_log_var)``, float32 ``(N, latent_dim)`` in input order."""
    return encode_batches(run, encode_ids(run, data, strict).ids, batch_size)


def encode_to_file(run: Run, data, out: str, log_var_out: str | None = None, *,
                   strict: bool = False, batch_size: int = 1000, chunk_size: int = 10_000,
                   progress: Callable[[int, int, float], None] | None = None) -> dict:
    """Encodes any number of sequences into ``.npy`` files of means (and log variances), streaming.

    Row ``i`` of each file belongs to the ``i``-th sequence of ``data``, whatever happens to the
    others: a sequence the run cannot encode (an invalid SMILES, a token not in the vocabulary,
    longer than ``max_len``, no SELFIES for it) gets a row of NaN, is counted by kind, and the
    first five are named by line (``strict``: the first is an error instead). A library of
    millions is not lost to one odd line, and its rows stay aligned with its lines.

    ``data`` is read ``chunk_size`` sequences at a time (``sources.iter_sequences``); each chunk is
    encoded in batches of sequences of similar length, each batch cut to its longest sequence (an
    encoder reads up to the first ``<pad>``, so this changes no value), and its rows are appended
    to the files in input order (``files.NpyRowWriter``). TensorFlow encodes one chunk on a
    second thread while this one reads and checks the next (27% more molecules a second for a
    Kekule run on 2 cores than one after the other). Memory holds two chunks, whatever the
    input's size.

    Args:
      run: the loaded run.
      data: path, ``moses:SPLIT`` or list, as ``sources.read_sequences``.
      out: ``.npy`` path for the means, float32 ``(N, latent_dim)``.
      log_var_out: ``.npy`` path for the log variances, or None.
      progress: called after each chunk with (sequences read, an upper bound of the total, rows
        encoded per second so far).

    Returns:
      ``{"rows", "encoded", "skipped", "skipped_by_kind", "seconds", "per_second", "messages"}``:
      rows written (one per sequence), rows encoded, NaN rows, their count per kind (see
      ``EncodedTexts``), seconds, rows per second, and the first five NaN rows' messages.

    Raises:
      SeqvaeError: ``strict`` and a sequence cannot be encoded, or no sequence can be.
    """
    from collections import Counter

    from seqvae.files import NpyRowWriter

    latent = run.config.model.latent_dim
    encoder = compiled_lib.compiled_encoder(run)
    total = sources.count_records(data, run.config.data.column)
    kinds, messages, started = Counter(), [], time.monotonic()
    with contextlib.ExitStack() as stack:
        writers = [stack.enter_context(NpyRowWriter(path, latent))
                   for path in (out, log_var_out) if path]
        # TensorFlow encodes a chunk on this thread (it lets go of the GIL) while the main
        # thread reads and tokenizes the next one (RDKit, Python): one chunk ahead at most.
        encoding = stack.enter_context(concurrent.futures.ThreadPoolExecutor(1))
        stack.callback(encoding.shutdown, cancel_futures=True)
        pending = None

        def write(pending) -> None:
            future, encoded, count = pending
            for writer, values in zip(writers, future.result()):
                rows = np.full((count, latent), np.nan, np.float32)
                rows[encoded.kept] = values
                writer.write(rows)
            kinds.update(kind for _, kind, _ in encoded.problems)
            messages.extend(encoded.messages[:5 - len(messages)])
            if progress is not None:
                rate = writers[0].rows / max(time.monotonic() - started, 1e-9)
                progress(writers[0].rows, max(total, writers[0].rows), rate)

        for seqs in sources.iter_sequences(data, run.config.data.column, chunk_size):
            encoded = encode_texts(run.codec, seqs.texts, on_error="raise" if strict else "skip",
                                   source=seqs.source, line_numbers=seqs.line_numbers,
                                   check_molecules=not is_moses(seqs.source))
            if pending is not None:
                write(pending)
            pending = (encoding.submit(_encode_by_length, encoder, encoded.ids, encoded.lengths,
                                       batch_size, latent), encoded, len(seqs.texts))
        if pending is not None:
            write(pending)
        rows = writers[0].rows
        if rows == sum(kinds.values()):
            raise SeqvaeError(f"{data}: nothing to encode (no line can be encoded by this run)")
    seconds = time.monotonic() - started
    return {"rows": rows, "encoded": rows - sum(kinds.values()), "skipped": sum(kinds.values()),
            "skipped_by_kind": dict(kinds), "seconds": seconds,
            "per_second": rows / max(seconds, 1e-9), "messages": messages}


def _encode_by_length(encoder, ids: np.ndarray, lengths: np.ndarray, batch_size: int,
                      latent_dim: int):
    """``(z_mean, z_log_var)`` float32 ``(N, L)`` of ``ids (N, T)``, in input order, computed on
    batches of similar length cut to their longest row."""
    order = np.argsort(lengths, kind="stable")
    means = np.empty((len(ids), latent_dim), np.float32)
    log_vars = np.empty_like(means)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        longest = int(lengths[rows].max())
        mean, log_var = encoder(tf.constant(ids[rows, :longest]))
        means[rows], log_vars[rows] = mean.numpy(), log_var.numpy()
    return means, log_vars
