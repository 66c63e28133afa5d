"""Tests for seqvae/__init__.py: what importing the package sets up before TensorFlow starts."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _allocator_after_import(environment: dict) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    env.update(environment, PYTHONPATH=REPO)
    code = ("import os, sys, seqvae; assert 'tensorflow' not in sys.modules; "
            "print(os.environ.get('TF_CPU_ALLOCATOR_USE_BFC'))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


@pytest.mark.parametrize("given, expected", [({}, "true"),
                                             ({"TF_CPU_ALLOCATOR_USE_BFC": "false"}, "false")])
def test_import_chooses_the_bfc_allocator_unless_the_user_did(given, expected):
    # set before TensorFlow is imported, or TensorFlow never reads it
    assert _allocator_after_import(given) == expected


def _faults_reallocating(environment: dict) -> int:
    """Minor page faults of a second malloc, fill and free of 4 MiB after importing seqvae."""
    env = {k: v for k, v in os.environ.items()
           if k != "SEQVAE_MALLOPT" and not k.startswith("MALLOC_")}
    env.update(environment, PYTHONPATH=REPO)
    code = ("import ctypes, resource, seqvae\n"
            "libc = ctypes.CDLL(None)\n"
            "libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, (ctypes.c_void_p,)\n"
            "def fill(size=4 << 20):\n"
            "    block = libc.malloc(size); ctypes.memset(block, 1, size); libc.free(block)\n"
            "fill(); before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt; fill()\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt (Linux)")
def test_import_keeps_freed_heap_memory_unless_turned_off():
    # glibc maps a 4 MiB block, unmaps it on free, and the next one faults its 1,024 pages again
    assert _faults_reallocating({}) < 100
    assert _faults_reallocating({"SEQVAE_MALLOPT": "0"}) > 900
    assert _faults_reallocating({"MALLOC_ARENA_MAX": "4"}) > 900  # glibc's own settings: left alone


def _intra_op_threads_after_import(environment: dict, cpus: int | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TF_NUM_INTRAOP_THREADS"}
    env.update(environment, PYTHONPATH=REPO)
    pin = f"os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:{cpus}]); " if cpus else ""
    code = (f"import os, sys; {pin}import seqvae; assert 'tensorflow' not in sys.modules; "
            "print(os.environ.get('TF_NUM_INTRAOP_THREADS'))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity (Linux)")
def test_import_runs_each_op_on_one_thread_on_two_cores_unless_the_user_chose():
    assert _intra_op_threads_after_import({}, cpus=1) == "1"
    assert _intra_op_threads_after_import({"TF_NUM_INTRAOP_THREADS": "2"}, cpus=1) == "2"


def test_more_than_two_cores_keep_tensorflows_thread_pool(monkeypatch):
    import seqvae

    monkeypatch.delenv("TF_NUM_INTRAOP_THREADS", raising=False)
    monkeypatch.setattr(seqvae._os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    seqvae._one_thread_per_op()
    assert "TF_NUM_INTRAOP_THREADS" not in os.environ
    monkeypatch.setattr(seqvae._os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    seqvae._one_thread_per_op()
    assert os.environ["TF_NUM_INTRAOP_THREADS"] == "1"
