"""MOSES's own reference files: the statistics of its test splits as ``evaluate`` uses them, and
the FCD statistics MOSES precomputed (read without running pickled code)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from seqvae.data.moses import MOSES_HINT, moses_file
from seqvae.data.sources import read_sequences
from seqvae.errors import SeqvaeError
from seqvae.evaluation import reference_cache
from seqvae.evaluation.molecules import Progress
from seqvae.evaluation.references import ReferenceStats, reference_stats, with_fcd


_DEFAULT_REFERENCES: dict = {}


def moses_reference(split: str, include_fcd: bool = True,
                    progress: Progress = None) -> ReferenceStats:
    """The statistics of a whole MOSES split (``test`` or ``test_scaffolds``), as ``evaluate``
    uses them (cached; FCD's are MOSES's own): pass it as ``ref`` to compare with its scale."""
    return default_reference(split, include_fcd, False, progress or (lambda line: None))


def default_reference(split: str, include_fcd: bool, include_properties: bool,
                       progress: Progress) -> ReferenceStats:
    """Statistics of a MOSES split: from the user cache (minutes to compute the first time), then
    kept in this process.

    The FCD statistics are MOSES's own precomputed ones (``{split}_stats.npz``), as MOSES uses.
    """
    stats = _DEFAULT_REFERENCES.get(split)
    if stats is None or (include_properties and stats.properties is None):
        texts = read_sequences(f"moses:{split}").texts
        computed = reference_stats(texts, include_properties=include_properties, progress=progress)
        stats = computed if stats is None else dataclasses.replace(
            stats, properties=computed.properties)
    if include_fcd:  # MOSES's own, also where the split's cache entry holds recomputed ones
        stats = with_fcd(stats, _moses_fcd_statistics(split))
    _DEFAULT_REFERENCES[split] = stats
    return stats


def _moses_fcd_statistics(split: str) -> dict[str, np.ndarray]:
    """MOSES's precomputed ChemNet mean and covariance of a split, via the user cache."""
    import hashlib

    path = moses_file("dataset", "data", f"{split}_stats.npz")
    with open(path, "rb") as handle:
        key = "moses-" + hashlib.sha256(handle.read()).hexdigest()[:26]
    arrays = reference_cache.load_part(key, "moses_fcd")
    if arrays is None:
        fcd_stats = read_moses_stats(path)["FCD"]
        arrays = {"mean": np.asarray(fcd_stats["mu"], float),
                  "covariance": np.asarray(fcd_stats["sigma"], float)}
        reference_cache.save_part(key, "moses_fcd", arrays)
    return arrays


def read_moses_stats(path: str) -> dict:
    """The dict that MOSES pickled into ``stats.npy`` of its ``*_stats.npz``, unpickled with only
    the classes such a file needs (numpy arrays, Counter), so it can run no other code."""
    import pickle
    import zipfile

    allowed = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
               ("collections", "Counter")}

    class _Restricted(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if (module, name) not in allowed:
                raise SeqvaeError(f"{path}: refusing to unpickle {module}.{name}")
            if module.startswith("numpy.core") and hasattr(np, "_core"):  # numpy 2 renamed it
                module = "numpy._core" + module[len("numpy.core"):]
            return super().find_class(module, name)

    try:
        with zipfile.ZipFile(path) as archive, archive.open("stats.npy") as stream:
            version = np.lib.format.read_magic(stream)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            _shape, _fortran_order, dtype = read_header(stream)
            if dtype != object:
                raise ValueError("not a pickled object array")
            return _Restricted(stream, encoding="latin1").load().item()
    except (OSError, ValueError, KeyError, EOFError, pickle.UnpicklingError,
            zipfile.BadZipFile) as error:
        raise SeqvaeError(f"{path} is not MOSES's statistics file ({error}); "
                          f"reinstall molsets: {MOSES_HINT}") from None
