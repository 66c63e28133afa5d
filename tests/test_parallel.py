import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from seqvae import parallel

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _status(pid: int) -> dict[str, str]:
    """The fields of ``/proc/PID/status`` (empty once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            return dict(line.split(":", 1) for line in handle.read().splitlines() if ":" in line)
    except OSError:
        return {}


def _alive(pid: int) -> bool:
    state = _status(pid).get("State", "").strip()
    return bool(state) and not state.startswith("Z")  # a zombie has ended


def _children(pid: int) -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()
            and _status(int(entry)).get("PPid", "").strip() == str(pid) and _alive(int(entry))]


def test_map_chunks_in_one_process_keeps_the_order():
    reports = []
    maxima = parallel.map_chunks(max, list(range(1000)), reports.append, "x", parallel_min=10**9)
    assert maxima == sorted(maxima) and maxima[-1] == 999
    assert reports[-1].startswith("x: 1,000/1,000 molecules (1 process, ") and reports[-1].endswith(" s left)")


@pytest.mark.skipif(not sys.platform.startswith("linux") or parallel.worker_count() < 2,
                    reason="PR_SET_PDEATHSIG is Linux's; one core starts no workers")
def test_workers_end_when_their_parent_is_killed(tmp_path):
    (tmp_path / "slow.py").write_text(
        "def work(items):\n    import time\n    time.sleep(300)\n    return items\n")
    (tmp_path / "main.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(tmp_path)!r}, {REPO!r}]
        if __name__ == "__main__":
            import slow
            from seqvae import parallel
            parallel.map_chunks(slow.work, list(range(2000)), print, "x", parallel_min=1)
        """))
    parent = subprocess.Popen([sys.executable, str(tmp_path / "main.py")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(_children(parent.pid)) < 2:
            time.sleep(0.5)
        time.sleep(5)  # the workers have run their initializer and sleep in slow.work
        workers = _children(parent.pid)
        assert len(workers) >= 2, "the worker processes did not start"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(map(_alive, workers)):
            time.sleep(0.2)
        assert not any(map(_alive, workers)), "workers outlived their killed parent"
    finally:
        parent.kill()
        parent.wait()
