"""The MOSES metric suite as pure functions over lists of SMILES strings.

Each function's docstring defines its metric; the definitions are those of MOSES 0.3.1
(``moses/metrics/metrics.py`` and ``utils.py``), re-implemented without torch, pandas or scipy,
and without importing ``moses`` (its ``__init__`` imports torch). Only the MCF/PAINS filter lists
and the MOSES data splits are read from the installed ``molsets`` package, by file path.

Two things differ from MOSES on purpose and never change a value MOSES would return:

- Inputs with nothing to average over (no valid molecule) give ``nan`` where MOSES divides by zero.
- Every metric is computed once per distinct molecule and weighted by its count, which gives the
  same value as MOSES's per-molecule loop; generated sets from young models are mostly duplicates.

Tanimoto similarities use Morgan fingerprints (radius 2, 1024 bits, RDKit's default invariants),
their intersections counted exactly (``seqvae.evaluation.tanimoto``: popcounts of 64-bit words,
compiled by XLA) and divided in float32, as MOSES's torch code does after its bit-matrix product.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import math
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from seqvae import parallel
from seqvae.data.chemistry import canonical_smiles, remove_invalid, to_mol
from seqvae.data.moses import MOSES_HINT, moses_file
from seqvae.data.sources import read_sequences
from seqvae.errors import SeqvaeError
from seqvae.evaluation import reference_cache
from seqvae.evaluation.tanimoto import aggregate_tanimoto

if TYPE_CHECKING:
    from rdkit.Chem import Mol

FINGERPRINT_BITS = 1024
FINGERPRINT_RADIUS = 2
ALLOWED_FILTER_ATOMS = frozenset({"C", "N", "S", "O", "F", "Cl", "Br", "H"})
_FCD_HINT = "pip install torch==2.13.0 fcd==1.2.2 (or pip install 'seqvae[fcd]')"

Progress = Callable[[str], None] | None


class MissingExtraError(SeqvaeError):
    """An optional dependency (an ``extras_require`` group of seqvae) is not installed."""


# --- molecules ----------------------------------------------------------------------------------


MOLECULE_PARTS = ("fingerprints", "fragments", "scaffolds", "filters", "properties")


@dataclasses.dataclass(frozen=True, eq=False)
class _Molecules:
    """Distinct valid molecules of a list, with how often each occurred and what the metrics
    need of each (``_molecule_features``)."""

    smiles: list[str]  # per distinct canonical SMILES, its first occurrence as given
    counts: np.ndarray  # (U,) float64 occurrences of each
    invalid: int  # entries that did not parse
    features: dict  # the MOLECULE_PARTS computed: part -> one value per molecule


def _distinct(smiles: Sequence[str], parts: Sequence[str] = (), progress: Progress = None,
              keys: Sequence[str | None] | None = None) -> _Molecules:
    """The distinct valid molecules of ``smiles`` and their ``parts`` (on every core for many).

    ``keys``: the canonical SMILES of each entry (None: invalid), if already known.
    """
    from rdkit import rdBase

    if keys is None:
        with rdBase.BlockLogs():
            keys = [canonical_smiles(item) for item in smiles]
    first: dict[str, str] = {}
    counts: Counter = Counter()
    invalid = 0
    for item, key in zip(smiles, keys):
        if key is None:
            invalid += 1
            continue
        first.setdefault(key, item)
        counts[key] += 1
    distinct = list(first.values())
    features: dict[str, Any] = {}
    if parts:
        chunks = parallel.map_chunks(functools.partial(_molecule_features, parts=tuple(parts)),
                                     distinct, progress or (lambda line: None), "generated",
                                     _PARALLEL_MIN_GEN)
        for part in parts:
            if part == "fingerprints":
                features[part] = np.concatenate([c[part] for c in chunks])
            elif part == "properties":
                features[part] = {name: np.concatenate([c[part][name] for c in chunks])
                                  for name in PROPERTY_NAMES}
            else:
                features[part] = [value for c in chunks for value in c[part]]
    return _Molecules(distinct, np.array([counts[k] for k in first], float), invalid, features)


def _canonical_twice(smiles: Sequence[str]) -> list[tuple[str, str | None]]:
    """For each valid SMILES of ``smiles`` in order (invalid ones left out), its canonical form
    and that form canonicalized again: MOSES's ``remove_invalid``, then the ``canonic_smiles``
    its metrics apply to the result. Runs in worker processes too."""
    from rdkit import rdBase

    with rdBase.BlockLogs():
        once = [form for form in map(canonical_smiles, smiles) if form is not None]
        return [(form, canonical_smiles(form)) for form in once]


def _molecule_features(smiles: Sequence[str], parts: tuple[str, ...]) -> dict:
    """Of each molecule of ``smiles`` (valid SMILES), the ``parts`` asked for: ``fingerprints``
    (N, 128) packed bits, ``fragments`` (a list each), ``scaffolds`` (str or None each),
    ``filters`` (N,) bool (``passes_filters``), ``properties`` {PROPERTY_NAMES: (N,)}.

    Runs in worker processes too, so it takes and returns only plain picklable values.
    """
    from rdkit import rdBase

    with rdBase.BlockLogs():
        return _mol_features([to_mol(s) for s in smiles], parts)


def _mol_features(mols: Sequence[Mol], parts: Sequence[str]) -> dict:
    """``_molecule_features`` of parsed molecules (the reference statistics use it too)."""
    features: dict[str, Any] = {}
    if "fingerprints" in parts:
        features["fingerprints"] = _fingerprints(mols)
    if "fragments" in parts:
        features["fragments"] = [_fragments(mol) for mol in mols]
    if "scaffolds" in parts:
        features["scaffolds"] = [_scaffold(mol) for mol in mols]
    if "filters" in parts:
        features["filters"] = np.array([passes_filters(mol) for mol in mols], bool)
    if "properties" in parts:
        features["properties"] = {name: np.array([function(mol) for mol in mols], float)
                                  for name, function in _property_functions().items()}
    return features


# --- fingerprints and Tanimoto ------------------------------------------------------------------


def _fingerprints(mols: Sequence[Mol]) -> np.ndarray:
    """Morgan bits of each molecule, packed: (N, FINGERPRINT_BITS // 8) uint8."""
    from rdkit.Chem import rdFingerprintGenerator

    generator = rdFingerprintGenerator.GetMorganGenerator(
        radius=FINGERPRINT_RADIUS, fpSize=FINGERPRINT_BITS
    )
    packed = np.zeros((len(mols), FINGERPRINT_BITS // 8), np.uint8)
    for row, mol in enumerate(mols):
        packed[row] = np.packbits(generator.GetFingerprintAsNumPy(mol))
    return packed


# --- fragments and scaffolds --------------------------------------------------------------------


def _fragments(mol: Mol) -> list[str]:
    from rdkit import Chem

    return Chem.MolToSmiles(Chem.FragmentOnBRICSBonds(mol)).split(".")


def _scaffold(mol: Mol, min_rings: int = 2) -> str | None:
    from rdkit import Chem
    from rdkit.Chem.Scaffolds import MurckoScaffold

    try:
        scaffold = MurckoScaffold.GetScaffoldForMol(mol)
    except (ValueError, RuntimeError):
        return None
    smiles = Chem.MolToSmiles(scaffold)
    if not smiles or scaffold.GetRingInfo().NumRings() < min_rings:
        return None
    return smiles


def _count(keys_per_mol: Iterable[Iterable[str]], counts: np.ndarray) -> Counter:
    total: Counter = Counter()
    for keys, count in zip(keys_per_mol, counts):
        for key in keys:
            total[key] += int(count)
    return total


def _cosine(ref_counts: dict, gen_counts: dict) -> float:
    """Cosine similarity of {key: count} vectors, missing keys being zero; nan if one is empty."""
    if not ref_counts or not gen_counts:
        return math.nan
    ref = np.array(list(ref_counts.values()), float)
    gen = np.array(list(gen_counts.values()), float)
    dot = sum(float(n) * ref_counts[key] for key, n in gen_counts.items() if key in ref_counts)
    return float(dot / (np.linalg.norm(ref) * np.linalg.norm(gen)))


# --- reference statistics -----------------------------------------------------------------------

PROPERTY_NAMES = ("logP", "SA", "QED", "weight")  # MOSES's names, in get_all_metrics's order
_PARALLEL_MIN = 20000  # reference molecules below which worker processes cost more than they save
_PARALLEL_MIN_GEN = 500  # the same for generated molecules (filters, properties: ~10 ms each)


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


def _property_functions() -> dict[str, Callable]:
    from seqvae.data import chemistry

    return {"logP": chemistry.logp, "SA": chemistry.sa_score, "QED": chemistry.qed,
            "weight": chemistry.molecular_weight}


def _reference_features(smiles: Sequence[str], base: bool, properties: bool,
                        canonical: bool) -> dict:
    """Everything ``reference_stats`` collects from one chunk of a reference set.

    Runs in worker processes too, so it takes and returns only plain picklable values.
    """
    from rdkit import rdBase

    parts = (("fingerprints", "fragments", "scaffolds") if base else ()) + (
        ("properties",) if properties else ())
    with rdBase.BlockLogs():
        mols = [m for m in map(to_mol, smiles) if m is not None]
        features = _mol_features(mols, parts)
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
        _import_fcd()
    if not cache:
        return _compute_parts(ref, None, True, include_properties, include_fcd, report)
    key = reference_cache.reference_key(ref)
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
        stats = _with_fcd(stats, fcd_arrays)
    return stats


def _fcd_arrays(stats: ReferenceStats) -> dict[str, np.ndarray]:
    """The FCD part; empty arrays stand for "fewer than 2 molecules, no statistics"."""
    if stats.fcd_mean is None:
        return {"mean": np.zeros(0), "covariance": np.zeros((0, 0))}
    return {"mean": stats.fcd_mean, "covariance": stats.fcd_covariance}


def _with_fcd(stats: ReferenceStats, arrays: dict[str, np.ndarray]) -> ReferenceStats:
    if "mean" not in arrays or "covariance" not in arrays:
        return stats
    if not arrays["mean"].size:  # fewer than 2 valid molecules: FCD is undefined
        return stats
    return dataclasses.replace(stats, fcd_mean=arrays["mean"], fcd_covariance=arrays["covariance"])


def _compute_parts(ref: list[str], stats: ReferenceStats | None, base: bool, properties: bool,
                   fcd: bool, report: Callable[[str], None]) -> ReferenceStats:
    """``stats`` (None: nothing yet) completed with the parts asked for."""
    if base or properties or fcd:
        features = functools.partial(_reference_features, base=base, properties=properties,
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
        mean, covariance = _chemnet_statistics([s for c in chunks for s in c["canonical"]])
        stats = dataclasses.replace(stats, fcd_mean=mean, fcd_covariance=covariance)
    return stats


def _as_reference(ref: Sequence[str] | ReferenceStats, include_properties: bool = False
                  ) -> ReferenceStats:
    if isinstance(ref, ReferenceStats):
        return ref
    return reference_stats(ref, include_properties=include_properties)


# --- metrics ------------------------------------------------------------------------------------


def fraction_valid(gen: Sequence[str]) -> float:
    """Valid: the fraction of ``gen`` that RDKit parses and sanitizes (``to_mol`` not None).

    Returns nan for an empty list.
    """
    from rdkit import rdBase

    if not gen:
        return math.nan
    with rdBase.BlockLogs():
        return 1 - sum(to_mol(s) is None for s in gen) / len(gen)


def fraction_unique(
    gen: Sequence[str], k: int | None = None, *, check_validity: bool = True
) -> float:
    """unique@k: distinct canonical SMILES among the first ``k`` entries, divided by their number.

    MOSES applies it to the valid molecules only (see ``moses_metrics``). With fewer than ``k``
    entries it warns and uses all of them; ``k=None`` uses all.

    Raises:
        SeqvaeError: ``check_validity`` and an entry is not a valid molecule.
    """
    from rdkit import rdBase

    if k is not None:
        if len(gen) < k:
            warnings.warn(f"Can't compute unique@{k}: gen contains only {len(gen)} molecules")
        gen = gen[:k]
    if not gen:
        return math.nan
    with rdBase.BlockLogs():
        canonic = list(map(canonical_smiles, gen))
    if None in canonic and check_validity:
        raise SeqvaeError("fraction_unique got an invalid SMILES; pass only valid molecules")
    return _unique_fraction(canonic)


def _unique_fraction(canonical: Sequence[str | None]) -> float:
    """Distinct entries of a list of canonical SMILES over its length (nan when empty)."""
    return len(set(canonical)) / len(canonical) if canonical else math.nan


def novelty(gen: Sequence[str], train: Iterable[str]) -> float:
    """Novelty: the fraction of distinct valid canonical SMILES of ``gen`` not in ``train``.

    ``train`` is compared as given (MOSES's training split is already canonical); canonicalize it
    first if it is not. nan if ``gen`` has no valid molecule.
    """
    from rdkit import rdBase

    with rdBase.BlockLogs():
        gen_set = set(map(canonical_smiles, gen)) - {None}
    return _novelty(gen_set, train)


def _novelty(gen_set: set[str], train: Iterable[str]) -> float:
    """Fraction of a set of canonical SMILES not in ``train`` (nan when the set is empty)."""
    if not gen_set:
        return math.nan
    train_set = train if isinstance(train, (set, frozenset)) else set(train)
    return len(gen_set - train_set) / len(gen_set)


def internal_diversity(gen: Sequence[str], p: int = 1) -> float:
    """IntDiv_p: one minus the mean over x of the power-mean Tanimoto of x to all of ``gen``.

    ``IntDiv_p = 1 - 1/|G| sum_{x in G} (1/|G| sum_{y in G} T(x, y)^p)^(1/p)`` over the valid
    molecules G (duplicates and the pair x = y included), with T the Tanimoto similarity of Morgan
    r=2 1024-bit fingerprints. p=1 is MOSES's IntDiv, p=2 its IntDiv2. nan if G is empty.
    """
    return _internal_diversity(_distinct(gen, ("fingerprints",)), p)


def _internal_diversity(molecules: _Molecules, p: int) -> float:
    if not molecules.smiles:
        return math.nan
    bits = molecules.features["fingerprints"]
    weights = molecules.counts / molecules.counts.sum()
    per_molecule = aggregate_tanimoto(bits, bits, agg="mean", p=p, ref_weights=weights)
    return float(1 - per_molecule @ weights)


def passes_filters(smiles: str | Mol) -> bool:
    """Whether a molecule passes MOSES's filters (``mol_passes_filters``).

    It must be valid, have no ring of 8 or more atoms, no formal charge, only the atoms C, N, S, O,
    F, Cl, Br, H, match none of the MCF and PAINS (wehi_pains) SMARTS on its explicit-hydrogen
    form, and its non-isomeric SMILES must be non-empty and parse again.
    """
    from rdkit import Chem

    mol = to_mol(smiles)
    if mol is None:
        return False
    if any(len(ring) >= 8 for ring in mol.GetRingInfo().AtomRings()):
        return False
    if any(atom.GetFormalCharge() != 0 for atom in mol.GetAtoms()):
        return False
    if any(atom.GetSymbol() not in ALLOWED_FILTER_ATOMS for atom in mol.GetAtoms()):
        return False
    with_hydrogens = Chem.AddHs(mol)
    patterns = _filter_patterns()
    if any(with_hydrogens.HasSubstructMatch(patterns[i])
           for i in _filter_candidates(with_hydrogens)):
        return False
    smiles = Chem.MolToSmiles(mol, isomericSmiles=False)
    return bool(smiles) and Chem.MolFromSmiles(smiles) is not None


def fraction_passes_filters(gen: Sequence[str]) -> float:
    """Filters: the fraction of ``gen`` passing ``passes_filters``; invalid entries fail.

    nan for an empty list.
    """
    return _fraction_passes_filters(_distinct(gen, ("filters",)))


def _fraction_passes_filters(molecules: _Molecules) -> float:
    total = molecules.counts.sum() + molecules.invalid
    if not total:
        return math.nan
    passed = np.asarray(molecules.features["filters"], float)
    return float(passed @ molecules.counts / total)


def snn(gen: Sequence[str], ref: Sequence[str] | ReferenceStats) -> float:
    """SNN: mean over the valid molecules of ``gen`` of the Tanimoto similarity to the nearest
    molecule of ``ref`` (Morgan r=2 1024-bit fingerprints). nan if either has no valid molecule.
    """
    return _snn(_distinct(gen, ("fingerprints",)), _as_reference(ref))


def _snn(molecules: _Molecules, ref: ReferenceStats) -> float:
    if not molecules.smiles or not ref.size:
        return math.nan
    nearest = aggregate_tanimoto(molecules.features["fingerprints"], ref.fingerprints, agg="max")
    return float(nearest @ molecules.counts / molecules.counts.sum())


def frag_similarity(gen: Sequence[str], ref: Sequence[str] | ReferenceStats) -> float:
    """Frag: cosine similarity of the BRICS fragment count vectors of ``gen`` and ``ref``.

    Each valid molecule is cut on its BRICS bonds (``FragmentOnBRICSBonds``) and every fragment's
    canonical SMILES (dummy atoms included) is counted over the set. nan if either count is empty.
    """
    return _frag_similarity(_distinct(gen, ("fragments",)), _as_reference(ref))


def _frag_similarity(molecules: _Molecules, ref: ReferenceStats) -> float:
    return _cosine(ref.fragments, _count(molecules.features["fragments"], molecules.counts))


def scaffold_similarity(gen: Sequence[str], ref: Sequence[str] | ReferenceStats) -> float:
    """Scaf: cosine similarity of the Bemis-Murcko scaffold count vectors of ``gen`` and ``ref``.

    Scaffolds with fewer than 2 rings (and acyclic molecules) are not counted. nan if either
    count is empty.
    """
    return _scaffold_similarity(_distinct(gen, ("scaffolds",)), _as_reference(ref))


def _scaffold_similarity(molecules: _Molecules, ref: ReferenceStats) -> float:
    scaffolds = ([s] if s is not None else [] for s in molecules.features["scaffolds"])
    return _cosine(ref.scaffolds, _count(scaffolds, molecules.counts))


def _import_fcd() -> Any:
    try:
        import fcd  # noqa: F401  (imports torch)
    except ImportError as error:
        raise MissingExtraError(f"FCD needs the fcd extra ({error}); {_FCD_HINT}") from None
    return fcd


def _chemnet_statistics(smiles: Sequence[str]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Mean (512,) and covariance (512, 512) of ChemNet activations; Nones for < 2 molecules.

    Each SMILES is cut at its first ``.``, as MOSES's ChemNet encoder (fcd_torch) does, since it
    reads ``.`` as the end of the string; the ``fcd`` package would encode every fragment.
    """
    fcd_package = _import_fcd()
    smiles = [text.split(".", 1)[0] for text in smiles]
    if len(smiles) < 2:
        return None, None
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    chemnet = fcd_package.load_ref_model()
    activations = fcd_package.get_predictions(chemnet, list(smiles), device=device)
    return activations.mean(0), np.cov(activations.T)


# What defines the cached reference statistics: ``reference_cache`` hashes the source of these
# (and all of ``seqvae.data.chemistry``) into its keys, so changing any of them recomputes the
# statistics, while a change to the metrics' own arithmetic keeps the cache.
STATISTICS_CODE = (_reference_features, _mol_features, _fingerprints, _fragments, _scaffold,
                   _property_functions, _base_arrays, _base_from_arrays, _chemnet_statistics)


def fcd(gen: Sequence[str], ref: Sequence[str] | ReferenceStats) -> float:
    """FCD: Frechet distance between Gaussians fitted to ChemNet activations of gen and ref.

    ``||mu_g - mu_r||^2 + Tr(S_g + S_r - 2 (S_g S_r)^(1/2))`` over the canonical SMILES of the
    valid molecules (duplicates included), as MOSES computes with fcd_torch; nan with fewer than 2
    molecules on either side. Needs the optional ``fcd`` package (and torch). A list ``ref``
    goes through ``reference_stats``, so its ChemNet statistics are computed once and cached.

    Raises:
        MissingExtraError: fcd or torch is not installed.
    """
    _import_fcd()
    if not isinstance(ref, ReferenceStats):
        ref = reference_stats(ref, include_fcd=True)
    if ref.fcd_mean is None and ref.size >= 2:
        raise SeqvaeError("these ReferenceStats have no FCD statistics; "
                          "build them with reference_stats(..., include_fcd=True)")
    return _frechet_distance(_chemnet_statistics(remove_invalid(gen)),
                             (ref.fcd_mean, ref.fcd_covariance))


def _frechet_distance(gen_statistics: tuple, ref_statistics: tuple) -> float:
    (gen_mean, gen_covariance), (ref_mean, ref_covariance) = gen_statistics, ref_statistics
    if gen_mean is None or ref_mean is None:
        return math.nan
    distance = _import_fcd().calculate_frechet_distance(
        mu1=gen_mean, sigma1=gen_covariance, mu2=ref_mean, sigma2=ref_covariance
    )
    return float(distance)


# --- molecular properties -----------------------------------------------------------------------


def wasserstein_1(
    u_values: np.ndarray,
    v_values: np.ndarray,
    u_weights: np.ndarray | None = None,
    v_weights: np.ndarray | None = None,
) -> float:
    """The Wasserstein-1 (earth mover's) distance between two weighted 1-D samples.

    ``W1(U, V) = integral |F_U(x) - F_V(x)| dx`` over the real line, F being the empirical
    distribution functions (weights default to 1 per value), which is what MOSES's
    ``WassersteinMetric`` computes with ``scipy.stats.wasserstein_distance``; this is scipy's
    algorithm, so weighting a value by its count gives the value of repeating it.

    Args:
        u_values: (N,) values of the first sample.
        v_values: (M,) values of the second.
        u_weights: (N,) non-negative weights of u_values, None for all ones.
        v_weights: (M,) likewise for v_values.

    Returns:
        The distance (in the unit of the values); nan if either sample is empty.
    """
    u_values, v_values = np.asarray(u_values, float), np.asarray(v_values, float)
    if not u_values.size or not v_values.size:
        return math.nan
    every = np.sort(np.concatenate([u_values, v_values]), kind="mergesort")  # (N + M,)
    deltas = np.diff(every)
    cdfs = []
    for values, weights in ((u_values, u_weights), (v_values, v_weights)):
        order = np.argsort(values)
        below = values[order].searchsorted(every[:-1], "right")  # values <= each point
        if weights is None:
            cdfs.append(below / values.size)
        else:
            cumulative = np.concatenate([[0.0], np.cumsum(np.asarray(weights, float)[order])])
            cdfs.append(cumulative[below] / cumulative[-1])
    return float(np.sum(np.abs(cdfs[0] - cdfs[1]) * deltas))


def property_distance(gen: Sequence[str], ref: Sequence[str] | ReferenceStats, name: str) -> float:
    """logP, SA, QED or weight: W1 between a property's values over gen and over ref.

    ``name`` is one of ``PROPERTY_NAMES``: Wildman-Crippen logP, synthetic accessibility (Ertl),
    QED, molecular weight (``seqvae.data.chemistry``), over the valid molecules of ``gen``
    (duplicates included) and of ``ref``, compared with ``wasserstein_1``. MOSES reports these
    four against its test split. nan if either has no valid molecule.
    """
    if name not in PROPERTY_NAMES:
        raise SeqvaeError(f"unknown property {name!r} (choose {', '.join(PROPERTY_NAMES)})")
    molecules = _distinct(gen, ("properties",))
    return _property_distance(molecules.features["properties"][name], molecules,
                              _as_reference(ref, include_properties=True), name)


def _property_distance(values: np.ndarray, molecules: _Molecules, ref: ReferenceStats,
                       name: str) -> float:
    if not molecules.smiles or not ref.size:
        return math.nan
    return wasserstein_1(values, ref.properties[name], molecules.counts)


# --- MOSES data files ---------------------------------------------------------------------------


_FILTERS: list = []


def _filter_patterns() -> list:
    """The MCF and PAINS SMARTS of MOSES, parsed once."""
    if not _FILTERS:
        from rdkit import Chem

        with open(moses_file("metrics", "mcf.csv"), newline="") as f:
            smarts = [row["smarts"] for row in csv.DictReader(f)]
        with open(moses_file("metrics", "wehi_pains.csv"), newline="") as f:
            smarts += [row[0].strip() for row in csv.reader(f) if row]
        _FILTERS.extend(p for p in map(Chem.MolFromSmarts, smarts) if p is not None)
    return _FILTERS


def _packed_pattern_fingerprint(mol: Mol) -> np.ndarray:
    """RDKit's pattern fingerprint (2,048 bits, made for substructure screening) as ``(32,)``
    uint64 words."""
    from rdkit import Chem, DataStructs

    bits = np.zeros(2048, np.uint8)
    DataStructs.ConvertToNumpyArray(Chem.PatternFingerprint(mol, fpSize=2048), bits)
    return np.packbits(bits).view(np.uint64)


@functools.lru_cache(maxsize=1)
def _filter_fingerprints() -> np.ndarray:
    """``(P, 32)`` uint64: the pattern fingerprint of each filter SMARTS."""
    return np.stack([_packed_pattern_fingerprint(p) for p in _filter_patterns()])


def _filter_candidates(mol: Mol) -> np.ndarray:
    """Indices of the filter patterns that ``mol`` can contain: every bit of a pattern's pattern
    fingerprint is set in a molecule that contains it (RDKit's substructure screen, the one its
    ``SubstructLibrary`` uses), so only these need ``HasSubstructMatch``: about 25 of the 502 on
    MOSES-like molecules, the same verdicts about 4x faster (``bench/filter_screen.py`` checks
    them on MOSES's test sets)."""
    patterns = _filter_fingerprints()
    words = _packed_pattern_fingerprint(mol)
    return np.flatnonzero(((patterns & words) == patterns).all(axis=1))


_DEFAULT_REFERENCES: dict = {}


def moses_reference(split: str, include_fcd: bool = True,
                    progress: Progress = None) -> ReferenceStats:
    """The statistics of a whole MOSES split (``test`` or ``test_scaffolds``), as ``evaluate``
    uses them (cached; FCD's are MOSES's own): pass it as ``ref`` to compare with its scale."""
    return _default_reference(split, include_fcd, False, progress or (lambda line: None))


def _default_reference(split: str, include_fcd: bool, include_properties: bool,
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
        stats = _with_fcd(stats, _moses_fcd_statistics(split))
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
        fcd_stats = _read_moses_stats(path)["FCD"]
        arrays = {"mean": np.asarray(fcd_stats["mu"], float),
                  "covariance": np.asarray(fcd_stats["sigma"], float)}
        reference_cache.save_part(key, "moses_fcd", arrays)
    return arrays


def _read_moses_stats(path: str) -> dict:
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


# --- the suite ----------------------------------------------------------------------------------


def moses_metrics(
    gen: Sequence[str],
    train: Iterable[str] | None = None,
    test: Sequence[str] | ReferenceStats | None = None,
    test_scaffolds: Sequence[str] | ReferenceStats | None = None,
    *,
    include_fcd: bool = True,
    k: Sequence[int] = (1000, 10000),
    progress: Progress = None,
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """MOSES's ``get_all_metrics`` set.

    ``valid`` is computed on all of ``gen``; every other metric on its valid molecules as canonical
    SMILES (MOSES's ``remove_invalid``), duplicates kept. A reference left as None is MOSES's own
    split read from the molsets package, as in MOSES. Reference statistics come from the user
    cache (``reference_stats``); ``ReferenceStats`` may also be passed directly.

    Args:
        gen: Generated SMILES.
        train: Training SMILES for Novelty (canonical, as MOSES's are).
        test: Test SMILES or their ``ReferenceStats`` (with ``include_properties`` for the
            Wasserstein distances).
        test_scaffolds: Scaffold-split test SMILES or their ``ReferenceStats``.
        include_fcd: Compute FCD/Test and FCD/TestSF (needs the fcd extra).
        k: The sizes for unique@k.
        progress: Called with a status line before each step.
        notes: Gets one line per metric not computed (FCD without the extra) or computed on
            fewer molecules than asked (unique@k), each starting with the metric's name.

    Returns:
        {"valid", "unique@1000", "unique@10000", "FCD/Test", "SNN/Test", "Frag/Test", "Scaf/Test",
        "FCD/TestSF", "SNN/TestSF", "Frag/TestSF", "Scaf/TestSF", "IntDiv", "IntDiv2", "Filters",
        "Novelty", "logP", "SA", "QED", "weight"}: floats (nan where undefined); the last four are
        ``property_distance`` to ``test``. FCD values are None when not computed, and the property
        distances None when ``test`` is a ``ReferenceStats`` without properties, with the reason
        in ``notes``.
    """
    report = progress or (lambda line: None)
    metrics: dict[str, Any] = {}
    notes = [] if notes is None else notes
    if include_fcd:
        try:
            _import_fcd()
        except MissingExtraError as error:
            include_fcd = False
            notes.append(f"FCD not computed: {error}")
    else:
        notes.append("FCD not computed: include_fcd=False")

    report(f"validity of {len(gen)} generated SMILES")
    chunks = parallel.map_chunks(_canonical_twice, list(gen), report, "validity", _PARALLEL_MIN_GEN)
    valid = [first for chunk in chunks for first, _ in chunk]  # what fraction_valid counts
    canonical = [second for chunk in chunks for _, second in chunk]
    metrics["valid"] = 1 - (len(gen) - len(valid)) / len(gen) if gen else math.nan  # as MOSES
    for size in k:
        if len(canonical) < size:
            notes.append(f"unique@{size}: only {len(canonical)} valid molecules, all of them used")
        metrics[f"unique@{size}"] = _unique_fraction(canonical[:size])
    report("fingerprints, fragments, scaffolds, filters and properties of the valid molecules")
    molecules = _distinct(valid, MOLECULE_PARTS, progress, keys=canonical)
    if include_fcd:
        report("ChemNet activations of the generated molecules")
        gen_chemnet = _chemnet_statistics([s for s in canonical if s is not None])

    references = {"Test": test, "TestSF": test_scaffolds}
    for name, default_split in (("Test", "test"), ("TestSF", "test_scaffolds")):
        ref = references[name]
        if ref is None:
            report(f"reference {name}: MOSES {default_split} split (computed once per process)")
            ref = _default_reference(default_split, include_fcd, name == "Test", progress)
        elif not isinstance(ref, ReferenceStats):
            report(f"reference {name}: {len(ref)} SMILES")
            ref = reference_stats(ref, include_fcd=include_fcd, include_properties=name == "Test",
                                  progress=progress)
        if name == "Test":
            test_stats = ref
        metrics[f"FCD/{name}"] = None
        if include_fcd:
            if ref.fcd_mean is None:
                notes.append(f"FCD/{name} not computed: its ReferenceStats has no FCD statistics")
            else:
                metrics[f"FCD/{name}"] = _frechet_distance(
                    gen_chemnet, (ref.fcd_mean, ref.fcd_covariance)
                )
        report(f"SNN/{name}")
        metrics[f"SNN/{name}"] = _snn(molecules, ref)
        report(f"Frag/{name}")
        metrics[f"Frag/{name}"] = _frag_similarity(molecules, ref)
        report(f"Scaf/{name}")
        metrics[f"Scaf/{name}"] = _scaffold_similarity(molecules, ref)

    report("IntDiv, IntDiv2")
    metrics["IntDiv"] = _internal_diversity(molecules, 1)
    metrics["IntDiv2"] = _internal_diversity(molecules, 2)
    report("Filters")
    metrics["Filters"] = _fraction_passes_filters(molecules)
    report("Novelty")
    if train is None:
        train = read_sequences("moses:train").texts
    metrics["Novelty"] = _novelty(set(canonical) - {None}, train)
    report("logP, SA, QED, weight")
    if test_stats.properties is None and test_stats.size:
        notes.append("logP, SA, QED, weight not computed: the test ReferenceStats has no "
                     "properties; build it with reference_stats(..., include_properties=True)")
        metrics.update(dict.fromkeys(PROPERTY_NAMES))
    else:
        for prop, values in molecules.features["properties"].items():
            metrics[prop] = _property_distance(values, molecules, test_stats, prop)
    return metrics
