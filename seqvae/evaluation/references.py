"""Reference-set statistics (``ReferenceStats``): what the reference-based MOSES metrics need
of a reference set, computed once on every core and kept in the user cache
(``seqvae.evaluation.reference_cache``) under a key of the set's content and of the code below."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from seqvae import parallel
from seqvae.data.chemistry import canonical_smiles, to_mol
from seqvae.evaluation import chemnet
from seqvae.evaluation import reference_cache
from seqvae.evaluation.molecules import (FINGERPRINT_BITS, FINGERPRINT_RADIUS, PROPERTY_NAMES,
                                         Progress, fingerprints, fragments, mol_features,
                                         property_functions, scaffold)


_PARALLEL_MIN = 20000  # reference molecules below which worker processes cost more than they save


@dataclasses.dataclass(frozen=True, eq=False)
class ReferenceStats:
    """What the reference-based metrics need from one reference set, computed once.

    Build with ``reference_stats``; pass wherever a metric takes ``ref``/``test``.
    """

    size: int  # valid molecules in the reference set (invalid ones are skipped)
    fingerprints: np.ndarray  # (size, 128) packed Morgan r=2 1024-bit fingerprints
    fragments: dict  # BRICS fragment SMILES -> occurrences over the set
    scaffolds: dict  # Bemis-Murcko scaffold SMILES (>= 2 rings) -> occurrences
    fcd_mean: np.ndarray | None = None  # (512,) mean ChemNet activation, None if not computed
    fcd_covariance: np.ndarray | None = None  # (512, 512) their covariance
    properties: dict | None = None  # PROPERTY_NAMES -> (size,) float64 values, None if not computed


def reference_features(smiles: Sequence[str], base: bool, properties: bool,
                        canonical: bool) -> dict:
    """Everything ``reference_stats`` collects from one chunk of a reference set.

    Runs in worker processes too, so it takes and returns only plain picklable values.
    """
    from rdkit import rdBase

    parts = (("fingerprints", "fragments", "scaffolds") if base else ()) + (
        ("properties",) if properties else ())
    with rdBase.BlockLogs():
        mols = [m for m in map(to_mol, smiles) if m is not None]
        features = mol_features(mols, parts)
        if base:  # counted over the chunk
            features["fragments"] = Counter(f for each in features["fragments"] for f in each)
            features["scaffolds"] = Counter(s for s in features["scaffolds"] if s is not None)
        if canonical:
            features["canonical"] = list(map(canonical_smiles, mols))
    return features


def _base_arrays(stats: ReferenceStats) -> dict[str, np.ndarray]:
    arrays = {"fingerprints": stats.fingerprints}
    for name in ("fragments", "scaffolds"):
        counts = getattr(stats, name)
        arrays[f"{name}_keys"] = reference_cache.pack_strings(list(counts))
        arrays[f"{name}_counts"] = np.array(list(counts.values()), np.int64)
    return arrays


def _base_from_arrays(arrays: dict[str, np.ndarray]) -> ReferenceStats:
    counts = {}
    for name in ("fragments", "scaffolds"):
        values = arrays[f"{name}_counts"]
        keys = reference_cache.unpack_strings(arrays[f"{name}_keys"], len(values))
        counts[name] = dict(zip(keys, values.tolist()))
    bits = arrays["fingerprints"]
    return ReferenceStats(len(bits), bits, counts["fragments"], counts["scaffolds"])


def reference_stats(
    ref: Sequence[str],
    *,
    include_fcd: bool = False,
    include_properties: bool = False,
    progress: Progress = None,
    cache: bool = True,
) -> ReferenceStats:
    """Fingerprints, fragment and scaffold counts (and properties, ChemNet statistics) of ``ref``.

    Computed on all cores for large sets and kept in the user cache (``reference_cache``), keyed by
    ref's content and this code's version: a second call on the same set loads them in a second.

    Args:
        ref: Reference SMILES, e.g. a MOSES test split (176k molecules: minutes on one core).
        include_fcd: Also compute the FCD statistics (needs the ``fcd`` extra).
        include_properties: Also compute logP, SA, QED and weight of every molecule (for the
            Wasserstein distances).
        progress: Called with a status line now and then.
        cache: Read and fill the on-disk cache; False computes everything here and stores nothing.

    Returns:
        The statistics of ref's valid molecules, every molecule counted (duplicates included).

    Raises:
        MissingExtraError: ``include_fcd`` is set and fcd/torch are not installed.
    """
    report = progress or (lambda line: None)
    ref = list(ref)
    if include_fcd:
        chemnet.import_fcd()
    if not cache:
        return _compute_parts(ref, None, True, include_properties, include_fcd, report)
    key = reference_key(ref)
    stats = _load_cached(key)
    if _complete(stats, include_properties, include_fcd):
        report(f"reference: {len(ref)} molecules, statistics from the cache")
        return stats
    with reference_cache.fill_lock(key):
        stats = _load_cached(key)  # another process may have filled it while we waited
        if _complete(stats, include_properties, include_fcd):
            return stats
        wants_properties = include_properties and (stats is None or stats.properties is None)
        wants_fcd = include_fcd and (stats is None or stats.fcd_mean is None)
        filled = _compute_parts(ref, stats, stats is None, wants_properties, wants_fcd, report)
        if stats is None:
            reference_cache.save_part(key, "base", _base_arrays(filled))
        if wants_properties:
            reference_cache.save_part(key, "properties", filled.properties)
        if wants_fcd:
            reference_cache.save_part(key, "fcd", _fcd_arrays(filled))
        return filled


def _complete(stats: ReferenceStats | None, properties: bool, fcd: bool) -> bool:
    return stats is not None and not (properties and stats.properties is None) and not (
        fcd and stats.fcd_mean is None)


def _load_cached(key: str) -> ReferenceStats | None:
    base = reference_cache.load_part(key, "base")
    if base is None:
        return None
    stats = _base_from_arrays(base)
    properties = reference_cache.load_part(key, "properties")
    if properties is not None and all(len(properties.get(n, ())) == stats.size
                                      for n in PROPERTY_NAMES):
        stats = dataclasses.replace(stats, properties={n: properties[n] for n in PROPERTY_NAMES})
    fcd_arrays = reference_cache.load_part(key, "fcd")
    if fcd_arrays is not None:
        stats = with_fcd(stats, fcd_arrays)
    return stats


def _fcd_arrays(stats: ReferenceStats) -> dict[str, np.ndarray]:
    """The FCD part; empty arrays stand for "fewer than 2 molecules, no statistics"."""
    if stats.fcd_mean is None:
        return {"mean": np.zeros(0), "covariance": np.zeros((0, 0))}
    return {"mean": stats.fcd_mean, "covariance": stats.fcd_covariance}


def with_fcd(stats: ReferenceStats, arrays: dict[str, np.ndarray]) -> ReferenceStats:
    if "mean" not in arrays or "covariance" not in arrays:
        return stats
    if not arrays["mean"].size:  # fewer than 2 valid molecules: FCD is undefined
        return stats
    return dataclasses.replace(stats, fcd_mean=arrays["mean"], fcd_covariance=arrays["covariance"])


def _compute_parts(ref: list[str], stats: ReferenceStats | None, base: bool, properties: bool,
                   fcd: bool, report: Callable[[str], None]) -> ReferenceStats:
    """``stats`` (None: nothing yet) completed with the parts asked for."""
    if base or properties or fcd:
        features = functools.partial(reference_features, base=base, properties=properties,
                                     canonical=fcd)
        chunks = parallel.map_chunks(features, ref, report, "reference", _PARALLEL_MIN)
    if base:
        bits = [c["fingerprints"] for c in chunks]
        fragments, scaffolds = Counter(), Counter()
        for c in chunks:
            fragments.update(c["fragments"])
            scaffolds.update(c["scaffolds"])
        bits = np.concatenate(bits) if bits else np.zeros((0, FINGERPRINT_BITS // 8), np.uint8)
        stats = ReferenceStats(len(bits), bits, dict(fragments), dict(scaffolds))
    if properties:
        values = {name: np.concatenate([c["properties"][name] for c in chunks])
                  for name in PROPERTY_NAMES}
        stats = dataclasses.replace(stats, properties=values)
    if fcd:
        report("reference: ChemNet activations for FCD")
        mean, covariance = chemnet.chemnet_statistics([s for c in chunks for s in c["canonical"]])
        stats = dataclasses.replace(stats, fcd_mean=mean, fcd_covariance=covariance)
    return stats


def as_reference(ref: Sequence[str] | ReferenceStats, include_properties: bool = False
                  ) -> ReferenceStats:
    if isinstance(ref, ReferenceStats):
        return ref
    return reference_stats(ref, include_properties=include_properties)


# What defines the cached reference statistics: ``reference_cache`` hashes the source of these
# (and all of ``seqvae.data.chemistry``) into its keys, so changing any of them recomputes the
# statistics, while a change to the metrics' own arithmetic keeps the cache.
STATISTICS_CODE = (reference_features, mol_features, fingerprints, fragments, scaffold,
                   property_functions, _base_arrays, _base_from_arrays, chemnet.chemnet_statistics)


def code_version() -> str:
    """Hash of what defines the statistics: the functions that compute them
    (``STATISTICS_CODE``), the chemistry module, the fingerprint size, RDKit's version and the
    cache's format."""
    import inspect

    import rdkit

    from seqvae.data import chemistry

    digest = hashlib.sha256(f"format {reference_cache.FORMAT_VERSION}\nrdkit {rdkit.__version__}"
                            f"\nmorgan {FINGERPRINT_RADIUS} {FINGERPRINT_BITS}\n".encode())
    with open(chemistry.__file__, "rb") as source:
        digest.update(source.read())
    for function in STATISTICS_CODE:
        digest.update(inspect.getsource(function).encode())
    return digest.hexdigest()


def reference_key(texts: Sequence[str]) -> str:
    """The cache key of a reference set: its content, in order, and the statistics code's
    version (``code_version``)."""
    digest = hashlib.sha256(code_version().encode())
    digest.update(len(texts).to_bytes(8, "little"))
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()[:32]
