"""Per-molecule work (RDKit: metrics' features, properties) on every core: chunks of a list
mapped in spawned worker processes, in order, with progress lines."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable


def worker_count() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def map_chunks(function: Callable[[list], Any], items: list, report: Callable[[str], None],
               label: str, parallel_min: int) -> list:
    """``function`` over chunks of ``items``, in order, on every core when there are at least
    ``parallel_min`` of them (in this process if worker processes cannot start).

    ``function`` must be picklable (a module-level function or a ``functools.partial`` of one)
    and take and return plain picklable values. Workers are spawned, not forked: the caller may
    hold TensorFlow's threads, which a fork would copy in whatever state they are in.

    Returns:
      One result per chunk, in the order of ``items``.
    """
    workers = worker_count() if len(items) >= parallel_min else 1
    chunk = max(250, min(20000, -(-len(items) // (workers * 4))))
    chunks = [items[start:start + chunk] for start in range(0, len(items), chunk)] or [[]]
    if workers > 1:
        from concurrent.futures.process import BrokenProcessPool

        try:
            return _map_in_processes(function, chunks, workers, report, label)
        except BrokenProcessPool:
            report(f"{label}: worker processes could not start (a script that calls seqvae needs "
                   "an `if __name__ == '__main__':` guard to use them); one process instead")
    results, done, total, started = [], 0, sum(map(len, chunks)), time.monotonic()
    for source in chunks:
        results.append(function(source))
        done += len(source)
        report(_progress_line(label, done, total, started, 1))
    return results


def _progress_line(label: str, done: int, total: int, started: float, workers: int) -> str:
    """``label: done/total molecules (N processes, R/s, T s left)``."""
    elapsed = max(time.monotonic() - started, 1e-9)
    rate = done / elapsed
    left = (total - done) / rate if rate > 0 else 0.0
    return (f"{label}: {done:,}/{total:,} molecules ({workers} process"
            f"{'es' if workers > 1 else ''}, {rate:,.0f}/s, {left:.0f} s left)")


def _map_in_processes(function: Callable[[list], Any], chunks: list[list], workers: int,
                      report: Callable[[str], None], label: str) -> list:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    results, done, total, started = [], 0, sum(map(len, chunks)), time.monotonic()
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=die_with_parent, initargs=(os.getpid(),))
    try:
        for source, result in zip(chunks, pool.map(function, chunks)):
            results.append(result)
            done += len(source)
            report(_progress_line(label, done, total, started, workers))
    finally:
        pool.shutdown(cancel_futures=True)
    return results


def die_with_parent(parent_pid: int) -> None:
    """A worker's first act: on Linux, ask the kernel to end it when its parent ends
    (``PR_SET_PDEATHSIG``), so that killing an evaluation (``kill -9``, the OOM killer) does not
    leave its workers computing for nobody; and end now if the parent is already gone."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # no libc symbol to call: carry on without it
            return
    if os.getppid() != parent_pid:
        os._exit(1)
