"""Writing files so that a crash never leaves a half-written one: the one atomic writer
(temporary file in the same folder, fsync, rename, the usual permissions), the JSON-lines
log that a crash can only cut at its last line, and where the user's cache is."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any, Iterator


@contextlib.contextmanager
def atomic_path(path: str, suffix: str = "") -> Iterator[str]:
    """Yields a temporary path beside ``path``; when the block ends without an error the file is
    fsynced, given the usual permissions (mkstemp makes it 0600) and renamed over ``path``, else
    removed. Readers see the old file or the new one, never a part."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=suffix)
    os.close(handle)
    try:
        yield tmp
        with open(tmp, "rb+") as written:
            os.fsync(written.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


CACHE_ENV = "SEQVAE_CACHE_DIR"


def user_cache_dir() -> str:
    """The user cache folder of seqvae: ``$SEQVAE_CACHE_DIR``, ``$XDG_CACHE_HOME/seqvae`` or
    ``~/.cache/seqvae`` (not created here)."""
    if os.environ.get(CACHE_ENV):
        return os.path.abspath(os.path.expanduser(os.environ[CACHE_ENV]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "seqvae")


def write_text_atomic(path: str, text: str) -> None:
    """Writes text (UTF-8) to ``path`` atomically (``atomic_path``)."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(text)


def write_json_atomic(path: str, value: Any) -> None:
    """Writes JSON to ``path`` atomically (``atomic_path``)."""
    write_text_atomic(path, json.dumps(value, indent=2, sort_keys=True))


def append_jsonl(path: str, record: dict) -> None:
    """Appends one JSON line with a single write and fsync (a crash loses at most that line)."""
    with open(path, "a") as out:
        out.write(json.dumps(record, sort_keys=True) + "\n")
        out.flush()
        os.fsync(out.fileno())


def read_jsonl(path: str) -> list[dict]:
    """Reads metrics.jsonl, ignoring a torn last line."""
    if not os.path.exists(path):
        return []
    records = []
    with open(path) as handle:
        for line in handle:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


class NpyRowWriter:
    """Writes a 2-D ``.npy`` file row block by row block, never holding it in memory.

    The header is written first with room for any row count and rewritten with the real count
    when the block ends; the file goes through ``atomic_path``, so an interrupted run leaves no
    ``.npy`` behind. Use as ``with NpyRowWriter(path, columns) as out: out.write(rows)``.
    """

    _PLACEHOLDER_ROWS = 10**15  # the header keeps room for this many digits

    def __init__(self, path: str, columns: int, dtype=None):
        import numpy as np

        self.path, self.columns, self.rows = path, columns, 0
        self.dtype = np.dtype(dtype or np.float32)
        self._atomic = atomic_path(path, suffix=".npy")
        self._handle = None

    def _header(self, rows: int) -> bytes:
        import io

        import numpy as np

        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(
            self.dtype), "fortran_order": False, "shape": (rows, self.columns)})
        return header.getvalue()

    def __enter__(self) -> "NpyRowWriter":
        tmp = self._atomic.__enter__()
        self._handle = open(tmp, "wb")
        self._header_size = len(self._header(self._PLACEHOLDER_ROWS))
        self._handle.write(self._header(self._PLACEHOLDER_ROWS))
        return self

    def write(self, rows) -> None:
        """Appends ``rows`` ``(n, columns)``, converted to the file's dtype."""
        import numpy as np

        rows = np.ascontiguousarray(rows, self.dtype)
        if rows.ndim != 2 or rows.shape[1] != self.columns:
            raise ValueError(f"expected rows of shape (n, {self.columns}), got {rows.shape}")
        self._handle.write(rows.tobytes())
        self.rows += len(rows)

    def __exit__(self, kind, error, trace) -> bool:
        try:
            if kind is None:
                header = self._header(self.rows)
                # same length as the placeholder: the dict padded with spaces before its newline
                header = header[:10] + header[10:-1].ljust(self._header_size - 11) + b"\n"
                header = header[:8] + (self._header_size - 10).to_bytes(2, "little") + header[10:]
                self._handle.seek(0)
                self._handle.write(header)
            self._handle.close()
        finally:
            self._atomic.__exit__(kind, error, trace)
        return False
