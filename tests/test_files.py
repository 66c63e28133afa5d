"""Tests for seqvae.files: the atomic writer and the streaming .npy writer."""

import os

import numpy as np
import pytest

from seqvae.files import NpyRowWriter, atomic_path


def test_atomic_path_leaves_nothing_when_the_block_fails(tmp_path):
    target = tmp_path / "out.txt"
    with pytest.raises(RuntimeError):
        with atomic_path(str(target)) as tmp:
            with open(tmp, "w") as handle:
                handle.write("half")
            raise RuntimeError("cut")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("blocks", [[3, 0, 5, 1], [0], [1000]])
def test_npy_row_writer_equals_np_save(tmp_path, blocks):
    rng = np.random.default_rng(0)
    parts = [rng.normal(size=(n, 7)) for n in blocks]  # float64, stored as float32
    path = tmp_path / "rows.npy"
    with NpyRowWriter(str(path), 7) as out:
        for part in parts:
            out.write(part)
    assert out.rows == sum(blocks)
    expected = np.concatenate(parts).astype(np.float32)
    np.save(tmp_path / "reference.npy", expected)
    loaded = np.load(path, allow_pickle=False)
    assert loaded.dtype == np.float32 and loaded.shape == (sum(blocks), 7)
    np.testing.assert_array_equal(loaded, expected)
    np.testing.assert_array_equal(np.load(path, mmap_mode="r"), expected)
    # the header has the size of the placeholder, so the data starts where numpy expects it
    assert os.path.getsize(path) % 64 == os.path.getsize(tmp_path / "reference.npy") % 64


def test_npy_row_writer_keeps_its_dtype_and_checks_shapes(tmp_path):
    path = tmp_path / "ints.npy"
    with NpyRowWriter(str(path), 2, dtype=np.int64) as out:
        out.write([[1, 2], [3, 4]])
        with pytest.raises(ValueError, match=r"\(n, 2\)"):
            out.write(np.zeros((2, 3)))
        with pytest.raises(ValueError):
            out.write(np.zeros(2))
    np.testing.assert_array_equal(np.load(path), [[1, 2], [3, 4]])
    assert np.load(path).dtype == np.int64


def test_npy_row_writer_interrupted_leaves_no_file(tmp_path):
    path = tmp_path / "z.npy"
    path.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt):
        with NpyRowWriter(str(path), 4) as out:
            out.write(np.ones((10, 4)))
            raise KeyboardInterrupt
    assert path.read_bytes() == b"old"  # the previous file stays, and no temporary is left
    assert sorted(os.listdir(tmp_path)) == ["z.npy"]
