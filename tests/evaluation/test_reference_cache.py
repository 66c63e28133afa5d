"""Tests for seqvae.evaluation.reference_cache and the cached, parallel ``reference_stats``."""

import multiprocessing
import os

import numpy as np
import pytest

from seqvae import parallel
from seqvae.evaluation import metrics, reference_cache, references

REF = ["CCO", "c1ccccc1", "CCOC(=O)c1ccccc1", "c1ccc(Cc2ccccc2)cc1", "xx", "CCN", "c1ccc2ccccc2c1",
       "O=C(O)c1ccccc1O", "C1CCC2CCCCC2C1"]


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SEQVAE_CACHE_DIR", str(tmp_path))
    return tmp_path


def _assert_same(a: references.ReferenceStats, b: references.ReferenceStats) -> None:
    assert a.size == b.size
    np.testing.assert_array_equal(a.fingerprints, b.fingerprints)
    assert a.fragments == b.fragments and a.scaffolds == b.scaffolds
    assert (a.properties is None) == (b.properties is None)
    for name in a.properties or {}:
        np.testing.assert_array_equal(a.properties[name], b.properties[name])


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("SEQVAE_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert reference_cache.cache_dir() == str(tmp_path / "home" / ".cache" / "seqvae")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert reference_cache.cache_dir() == str(tmp_path / "xdg" / "seqvae")
    monkeypatch.setenv("SEQVAE_CACHE_DIR", str(tmp_path / "mine"))
    assert reference_cache.cache_dir() == str(tmp_path / "mine")


def test_key_follows_content_and_code(monkeypatch):
    key = references.reference_key(REF)
    assert references.reference_key(list(REF)) == key
    assert references.reference_key(REF[::-1]) != key
    assert references.reference_key(REF[:-1]) != key
    assert references.reference_key(["CC", "O"]) != references.reference_key(["CCO"])
    monkeypatch.setattr(reference_cache, "FORMAT_VERSION", reference_cache.FORMAT_VERSION + 1)
    assert references.reference_key(REF) != key
    monkeypatch.undo()
    assert references.reference_key(REF) == key
    # the statistics' code is in the key; the metrics' arithmetic is not
    assert references.reference_features in references.STATISTICS_CODE
    assert metrics.snn_of not in references.STATISTICS_CODE
    monkeypatch.setattr(references, "STATISTICS_CODE",
                        references.STATISTICS_CODE[:-1] + (metrics.snn_of,))
    assert references.reference_key(REF) != key


def test_second_call_loads_without_computing(cache, monkeypatch):
    first = references.reference_stats(REF, include_properties=True)
    _assert_same(first, references.reference_stats(REF, include_properties=True, cache=False))
    parts = sorted(p.name for p in cache.glob("reference_stats/*/*.npz"))
    assert parts == ["base.npz", "properties.npz"]
    for path in cache.glob("reference_stats/*/*.npz"):
        with np.load(path, allow_pickle=False) as arrays:  # nothing in them needs unpickling
            assert all(arrays[name].dtype != object for name in arrays.files)

    def no_computing(*args, **kwargs):
        raise AssertionError("recomputed a cached reference")

    monkeypatch.setattr(references, "reference_features", no_computing)
    lines = []
    second = references.reference_stats(REF, include_properties=True, progress=lines.append)
    _assert_same(first, second)
    assert lines == [f"reference: {len(REF)} molecules, statistics from the cache"]


def test_missing_part_is_added_and_corrupt_part_recomputed(cache):
    base_only = references.reference_stats(REF)
    assert base_only.properties is None
    with_properties = references.reference_stats(REF, include_properties=True)
    np.testing.assert_array_equal(with_properties.fingerprints, base_only.fingerprints)
    assert len(with_properties.properties["QED"]) == base_only.size == 8
    (base,) = cache.glob("reference_stats/*/base.npz")
    base.write_bytes(b"not a zip file")
    again = references.reference_stats(REF, include_properties=True)
    _assert_same(again, with_properties)
    with np.load(base, allow_pickle=False) as arrays:
        assert arrays["fingerprints"].shape == (8, 128)


def test_parallel_equals_serial(cache, monkeypatch):
    serial = references.reference_stats(REF * 3, include_properties=True, cache=False)
    monkeypatch.setattr(references, "_PARALLEL_MIN", 1)
    monkeypatch.setattr(parallel, "worker_count", lambda: 2)
    lines = []
    on_cores = references.reference_stats(REF * 3, include_properties=True, cache=False,
                                             progress=lines.append)
    _assert_same(serial, on_cores)
    assert any("(2 processes, " in line for line in lines)


def _fill(cache_dir: str, queue) -> None:
    os.environ["SEQVAE_CACHE_DIR"] = cache_dir
    stats = references.reference_stats(REF * 20, include_properties=True)
    queue.put((stats.size, sorted(stats.fragments.items()), stats.properties["SA"].tolist()))


def test_two_processes_filling_at_once(cache):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_fill, args=(str(cache), queue)) for _ in range(2)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert results[0] == results[1]
    assert not list(cache.glob("reference_stats/*/.tmp-*"))  # no temporary file left behind
    loaded = references.reference_stats(REF * 20, include_properties=True)
    assert loaded.size == results[0][0] and loaded.properties["SA"].tolist() == results[0][2]
