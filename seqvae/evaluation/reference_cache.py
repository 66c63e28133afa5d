"""The on-disk cache of reference-set statistics: computed once, loaded in a fraction of a second.

``seqvae.evaluation.references.reference_stats`` fingerprints, fragments and scores every
molecule of a reference set (MOSES's test split: 176k molecules, minutes of CPU); this module
keeps the result between processes. Layout::

    CACHE_DIR/reference_stats/KEY/
      base.npz         fingerprints, fragment and scaffold counts
      properties.npz   logP, SA, QED and weight of every molecule (the Wasserstein distances)
      fcd.npz          ChemNet activation mean and covariance (computed by seqvae)
      moses_fcd.npz    the same, taken from MOSES's own precomputed file (MOSES's default splits)

``CACHE_DIR`` is ``$SEQVAE_CACHE_DIR``, else ``$XDG_CACHE_HOME/seqvae``, else ``~/.cache/seqvae``.
``KEY`` (``references.reference_key``) hashes the reference's content together with the code that
computes the statistics (the source of the functions in ``references.STATISTICS_CODE`` and the
bytes of ``chemistry.py``),
the RDKit version and this file format, so changing either the set or that code gives a new key,
never a stale hit.

Each part is a plain ``.npz`` of numeric arrays (strings are stored as UTF-8 bytes), loaded with
``allow_pickle=False``: a cache file can hold no code. Parts are written atomically (temporary file,
fsync, rename: ``seqvae.files.atomic_path``), and a fill holds an exclusive lock on the key's
folder, so two processes filling at once compute once and neither ever reads half a file. A part
that does not load (truncated, from a foreign tool) counts as missing and is recomputed.
"""

from __future__ import annotations

import contextlib
import os
import zipfile
from collections.abc import Iterator, Sequence

import numpy as np

from seqvae.files import CACHE_ENV, atomic_path, user_cache_dir  # noqa: F401 -- CACHE_ENV: its name

FORMAT_VERSION = 1  # bump when the layout of a part changes


def cache_dir() -> str:
    """The user cache folder of seqvae (``seqvae.files.user_cache_dir``: ``$SEQVAE_CACHE_DIR``,
    ``$XDG_CACHE_HOME/seqvae`` or ``~/.cache/seqvae``; not created here)."""
    return user_cache_dir()


def key_dir(key: str) -> str:
    """The folder of one reference set's parts."""
    return os.path.join(cache_dir(), "reference_stats", key)


def load_part(key: str, part: str) -> dict[str, np.ndarray] | None:
    """The arrays of ``KEY/PART.npz``, or None if it is missing or does not load."""
    path = os.path.join(key_dir(key), f"{part}.npz")
    try:
        with np.load(path, allow_pickle=False) as arrays:
            return {name: arrays[name] for name in arrays.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None


def save_part(key: str, part: str, arrays: dict[str, np.ndarray]) -> None:
    """Writes ``KEY/PART.npz`` atomically (readers see the old file or the new, never a part)."""
    path = os.path.join(key_dir(key), f"{part}.npz")
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, **arrays)


@contextlib.contextmanager
def fill_lock(key: str) -> Iterator[None]:
    """Holds an exclusive lock on a key while its parts are computed, so that a second process
    waits for them instead of computing them again (no lock where ``fcntl`` does not exist)."""
    folder = key_dir(key)
    os.makedirs(folder, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # Windows: atomic writes alone keep the cache consistent
        yield
        return
    with open(os.path.join(folder, ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def pack_strings(texts: Sequence[str]) -> np.ndarray:
    """Strings (without newlines) as one uint8 array of their UTF-8, newline-separated."""
    return np.frombuffer("\n".join(texts).encode("utf-8"), np.uint8)


def unpack_strings(packed: np.ndarray, count: int) -> list[str]:
    """The inverse of ``pack_strings`` for ``count`` strings."""
    if count == 0:
        return []
    return packed.tobytes().decode("utf-8").split("\n")
