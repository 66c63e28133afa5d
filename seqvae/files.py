"""Writing files so that a crash never leaves a half-written one: the one atomic writer
(temporary file in the same folder, fsync, rename, the usual permissions), and the JSON-lines
log that a crash can only cut at its last line."""

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
