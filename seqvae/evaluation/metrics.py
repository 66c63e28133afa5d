"""The MOSES metrics as pure functions over lists of SMILES strings.

Each function's docstring defines its metric; the definitions are those of MOSES 0.3.1
(``moses/metrics/metrics.py`` and ``utils.py``), re-implemented without torch, pandas or scipy,
and without importing ``moses`` (its ``__init__`` imports torch). Two things differ from MOSES on
purpose and never change a value MOSES would return:

- Inputs with nothing to average over (no valid molecule) give ``nan`` where MOSES divides by zero.
- Every metric is computed once per distinct molecule and weighted by its count
  (``molecules.distinct``; the ``*_of`` functions take those), which gives the same value as
  MOSES's per-molecule loop; generated sets from young models are mostly duplicates.

Tanimoto similarities use Morgan fingerprints (radius 2, 1024 bits, RDKit's default invariants),
their intersections counted exactly (``seqvae.evaluation.tanimoto``) and divided in float32, as
MOSES's torch code does after its bit-matrix product.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from seqvae.data.chemistry import canonical_smiles, remove_invalid, to_mol
from seqvae.errors import SeqvaeError
from seqvae.evaluation import chemnet
from seqvae.evaluation.molecules import PROPERTY_NAMES, Molecules, distinct
from seqvae.evaluation.references import ReferenceStats, as_reference, reference_stats
from seqvae.evaluation.tanimoto import aggregate_tanimoto


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
    return unique_fraction(canonic)


def unique_fraction(canonical: Sequence[str | None]) -> float:
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
    return novelty_of(gen_set, train)


def novelty_of(gen_set: set[str], train: Iterable[str]) -> float:
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
    return internal_diversity_of(distinct(gen, ("fingerprints",)), p)


def internal_diversity_of(molecules: Molecules, p: int) -> float:
    if not molecules.smiles:
        return math.nan
    bits = molecules.features["fingerprints"]
    weights = molecules.counts / molecules.counts.sum()
    per_molecule = aggregate_tanimoto(bits, bits, agg="mean", p=p, ref_weights=weights)
    return float(1 - per_molecule @ weights)


def fraction_passes_filters(gen: Sequence[str]) -> float:
    """Filters: the fraction of ``gen`` passing ``passes_filters``; invalid entries fail.

    nan for an empty list.
    """
    return fraction_passes_filters_of(distinct(gen, ("filters",)))


def fraction_passes_filters_of(molecules: Molecules) -> float:
    total = molecules.counts.sum() + molecules.invalid
    if not total:
        return math.nan
    passed = np.asarray(molecules.features["filters"], float)
    return float(passed @ molecules.counts / total)


def snn(gen: Sequence[str], ref: Sequence[str] | ReferenceStats) -> float:
    """SNN: mean over the valid molecules of ``gen`` of the Tanimoto similarity to the nearest
    molecule of ``ref`` (Morgan r=2 1024-bit fingerprints). nan if either has no valid molecule.
    """
    return snn_of(distinct(gen, ("fingerprints",)), as_reference(ref))


def snn_of(molecules: Molecules, ref: ReferenceStats) -> float:
    if not molecules.smiles or not ref.size:
        return math.nan
    nearest = aggregate_tanimoto(molecules.features["fingerprints"], ref.fingerprints, agg="max")
    return float(nearest @ molecules.counts / molecules.counts.sum())


def frag_similarity(gen: Sequence[str], ref: Sequence[str] | ReferenceStats) -> float:
    """Frag: cosine similarity of the BRICS fragment count vectors of ``gen`` and ``ref``.

    Each valid molecule is cut on its BRICS bonds (``FragmentOnBRICSBonds``) and every fragment's
    canonical SMILES (dummy atoms included) is counted over the set. nan if either count is empty.
    """
    return frag_similarity_of(distinct(gen, ("fragments",)), as_reference(ref))


def frag_similarity_of(molecules: Molecules, ref: ReferenceStats) -> float:
    return _cosine(ref.fragments, _count(molecules.features["fragments"], molecules.counts))


def scaffold_similarity(gen: Sequence[str], ref: Sequence[str] | ReferenceStats) -> float:
    """Scaf: cosine similarity of the Bemis-Murcko scaffold count vectors of ``gen`` and ``ref``.

    Scaffolds with fewer than 2 rings (and acyclic molecules) are not counted. nan if either
    count is empty.
    """
    return scaffold_similarity_of(distinct(gen, ("scaffolds",)), as_reference(ref))


def scaffold_similarity_of(molecules: Molecules, ref: ReferenceStats) -> float:
    scaffolds = ([s] if s is not None else [] for s in molecules.features["scaffolds"])
    return _cosine(ref.scaffolds, _count(scaffolds, molecules.counts))


def fcd(gen: Sequence[str], ref: Sequence[str] | ReferenceStats) -> float:
    """FCD: Frechet distance between Gaussians fitted to ChemNet activations of gen and ref.

    ``||mu_g - mu_r||^2 + Tr(S_g + S_r - 2 (S_g S_r)^(1/2))`` over the canonical SMILES of the
    valid molecules (duplicates included), as MOSES computes with fcd_torch; nan with fewer than 2
    molecules on either side. Needs the optional ``fcd`` package (and torch). A list ``ref``
    goes through ``reference_stats``, so its ChemNet statistics are computed once and cached.

    Raises:
        MissingExtraError: fcd or torch is not installed.
    """
    chemnet.import_fcd()
    if not isinstance(ref, ReferenceStats):
        ref = reference_stats(ref, include_fcd=True)
    if ref.fcd_mean is None and ref.size >= 2:
        raise SeqvaeError("these ReferenceStats have no FCD statistics; "
                          "build them with reference_stats(..., include_fcd=True)")
    return chemnet.frechet_distance(chemnet.chemnet_statistics(remove_invalid(gen)),
                             (ref.fcd_mean, ref.fcd_covariance))


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
    molecules = distinct(gen, ("properties",))
    return property_distance_of(molecules.features["properties"][name], molecules,
                              as_reference(ref, include_properties=True), name)


def property_distance_of(values: np.ndarray, molecules: Molecules, ref: ReferenceStats,
                       name: str) -> float:
    if not molecules.smiles or not ref.size:
        return math.nan
    return wasserstein_1(values, ref.properties[name], molecules.counts)
