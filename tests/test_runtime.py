"""Tests for seqvae/runtime.py: importing seqvae leaves the process alone; tune_process (which
the command line runs before TensorFlow starts) applies each setting, unless the user chose."""

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUNED = ("TF_CPU_ALLOCATOR_USE_BFC", "TF_NUM_INTRAOP_THREADS", "SEQVAE_TUNE")


def _run(code: str, environment: dict) -> str:
    env = {k: v for k, v in os.environ.items() if k not in TUNED and not k.startswith("MALLOC_")}
    env.update(environment, PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


def test_importing_seqvae_changes_no_environment_variable():
    code = ("import os, sys; before = dict(os.environ); import seqvae, seqvae.config, "
            "seqvae.data.sources; print(dict(os.environ) == before)")
    assert _run(code, {}) == "True"


@pytest.mark.parametrize("given, expected", [({}, "true"),
                                             ({"TF_CPU_ALLOCATOR_USE_BFC": "false"}, "false"),
                                             ({"SEQVAE_TUNE": "0"}, "None")])
def test_tuning_chooses_the_bfc_allocator_unless_the_user_did(given, expected):
    # set before TensorFlow is imported, or TensorFlow never reads it
    code = ("import os, sys; from seqvae import runtime; runtime.tune_process(); "
            "assert 'tensorflow' not in sys.modules; "
            "print(os.environ.get('TF_CPU_ALLOCATOR_USE_BFC'))")
    assert _run(code, given) == expected


def _faults_reallocating(environment: dict, tune: bool = True) -> int:
    """Minor page faults of a second malloc, fill and free of 4 MiB."""
    code = ("import ctypes, resource\n"
            + ("from seqvae import runtime; runtime.tune_process()\n" if tune else "import seqvae\n")
            + "libc = ctypes.CDLL(None)\n"
            "libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, (ctypes.c_void_p,)\n"
            "def fill(size=4 << 20):\n"
            "    block = libc.malloc(size); ctypes.memset(block, 1, size); libc.free(block)\n"
            "fill(); before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt; fill()\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)")
    return int(_run(code, environment))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt (Linux)")
def test_tuning_keeps_freed_heap_memory_unless_turned_off():
    # glibc maps a 4 MiB block, unmaps it on free, and the next one faults its 1,024 pages again
    assert _faults_reallocating({}) < 100
    assert _faults_reallocating({}, tune=False) > 900  # import alone changes nothing
    assert _faults_reallocating({"SEQVAE_TUNE": "0"}) > 900
    assert _faults_reallocating({"MALLOC_ARENA_MAX": "4"}) > 900  # glibc's own settings: left alone


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity (Linux)")
def test_tuning_runs_each_op_on_one_thread_on_two_cores_unless_the_user_chose():
    code = ("import os, sys; os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:1]); "
            "from seqvae import runtime; runtime.tune_process(); "
            "print(os.environ.get('TF_NUM_INTRAOP_THREADS'))")
    assert _run(code, {}) == "1"
    assert _run(code, {"TF_NUM_INTRAOP_THREADS": "2"}) == "2"


def test_more_than_two_cores_keep_tensorflows_thread_pool(monkeypatch):
    from seqvae import runtime

    monkeypatch.delenv("TF_NUM_INTRAOP_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert not runtime.one_thread_per_op()
    assert "TF_NUM_INTRAOP_THREADS" not in os.environ
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert runtime.one_thread_per_op()
    assert os.environ["TF_NUM_INTRAOP_THREADS"] == "1"


def test_the_command_line_tunes_the_process_before_tensorflow():
    code = ("import os, sys; from seqvae import cli; "
            "sys.argv = ['seqvae', 'train', '--help']\n"
            "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
            "print(os.environ.get('TF_CPU_ALLOCATOR_USE_BFC'), 'tensorflow' in sys.modules)")
    assert _run(code, {}).splitlines()[-1] == "true False"
