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
computed as a float32 bit-matrix product in chunks, the same arithmetic as MOSES's torch code.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from seqvae.data.chemistry import canonical_smiles, remove_invalid, to_mol
from seqvae.data.moses import moses_file
from seqvae.data.sources import read_sequences
from seqvae.errors import SeqvaeError

if TYPE_CHECKING:
    from rdkit.Chem import Mol

FINGERPRINT_BITS = 1024
FINGERPRINT_RADIUS = 2
ALLOWED_FILTER_ATOMS = frozenset({"C", "N", "S", "O", "F", "Cl", "Br", "H"})
_FCD_HINT = "pip install torch==2.13.0 fcd==1.2.2 (or pip install 'seqvae[fcd]')"
_MATRIX_ELEMENTS = 1 << 23  # elements per similarity block: 32 MB of float32 (measured fastest)

Progress = Callable[[str], None] | None


class MissingExtraError(SeqvaeError):
    """An optional dependency (an ``extras_require`` group of seqvae) is not installed."""


# --- molecules ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class _Molecules:
    """Distinct valid molecules of a list, with how often each occurred."""

    mols: list[Mol]  # one RDKit Mol per distinct canonical SMILES, in first-seen order
    counts: np.ndarray  # (U,) float64 occurrences of each
    invalid: int  # entries that did not parse


def _distinct(smiles: Iterable[str]) -> _Molecules:
    from rdkit import Chem, rdBase

    first: dict[str, Mol] = {}
    counts: Counter = Counter()
    invalid = 0
    with rdBase.BlockLogs():
        for item in smiles:
            mol = to_mol(item)
            if mol is None:
                invalid += 1
                continue
            key = Chem.MolToSmiles(mol)
            first.setdefault(key, mol)
            counts[key] += 1
    return _Molecules(list(first.values()), np.array([counts[k] for k in first], float), invalid)


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


def _aggregate_tanimoto(
    gen_bits: np.ndarray,
    ref_bits: np.ndarray,
    *,
    agg: str,
    p: int = 1,
    ref_weights: np.ndarray | None = None,
) -> np.ndarray:
    """For each generated fingerprint, the max or weighted power mean of Tanimoto over references.

    Args:
        gen_bits: (G, 128) packed generated fingerprints.
        ref_bits: (R, 128) packed reference fingerprints.
        agg: "max" or "mean".
        p: power of the mean, ``(sum_y w_y T(x, y)^p)^(1/p)``; ignored for "max".
        ref_weights: (R,) weights summing to 1 for "mean".

    Returns:
        (G,) float64 aggregated similarity; two empty fingerprints have similarity 1, as in MOSES.
    """
    gen = np.unpackbits(gen_bits, axis=1).astype(np.float32)  # (G, 1024)
    gen_sums = gen.sum(1)
    result = np.zeros(len(gen))
    chunk = max(1, _MATRIX_ELEMENTS // max(1, len(gen)))
    for start in range(0, len(ref_bits), chunk):
        ref = np.unpackbits(ref_bits[start : start + chunk], axis=1).astype(np.float32)
        ref_sums = ref.sum(1)
        jac = gen @ ref.T  # (G, r) intersections: exact integer counts in float32
        union = np.add.outer(gen_sums, ref_sums)
        union -= jac
        with np.errstate(invalid="ignore"):
            np.divide(jac, union, out=jac)  # in place: these blocks dominate the run time
        if not (gen_sums.all() and ref_sums.all()):
            jac[np.isnan(jac)] = 1.0
        if agg == "max":
            np.maximum(result, jac.max(1), out=result)
        else:
            if p != 1:
                jac **= p
            result += jac @ ref_weights[start : start + chunk].astype(np.float32)
    if agg == "mean" and p != 1:
        result **= 1.0 / p
    return result


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


def reference_stats(
    ref: Sequence[str], *, include_fcd: bool = False, progress: Progress = None
) -> ReferenceStats:
    """Precomputes fingerprints, fragment and scaffold counts (and ChemNet statistics) of ``ref``.

    Args:
        ref: Reference SMILES, e.g. a MOSES test split (176k molecules: 1.5 minutes on one core).
        include_fcd: Also compute the FCD statistics (needs the ``fcd`` extra).
        progress: Called with a status line now and then.

    Returns:
        The statistics of ref's valid molecules, every molecule counted (duplicates included).

    Raises:
        MissingExtraError: ``include_fcd`` is set and fcd/torch are not installed.
    """
    from rdkit import rdBase

    report = progress or (lambda line: None)
    ref = list(ref)
    fingerprints, fragments, scaffolds, valid = [], Counter(), Counter(), []
    block = 20000
    with rdBase.BlockLogs():
        for start in range(0, len(ref), block):
            mols = [m for m in map(to_mol, ref[start : start + block]) if m is not None]
            fingerprints.append(_fingerprints(mols))
            for mol in mols:
                fragments.update(_fragments(mol))
            scaffolds.update(s for s in map(_scaffold, mols) if s is not None)
            if include_fcd:
                valid.extend(map(canonical_smiles, mols))
            report(f"reference: {min(start + block, len(ref))}/{len(ref)} molecules")
    fcd_mean = fcd_covariance = None
    if include_fcd:
        report("reference: ChemNet activations for FCD")
        fcd_mean, fcd_covariance = _chemnet_statistics(valid)
    bits = np.concatenate(fingerprints) if fingerprints else np.zeros((0, 128), np.uint8)
    return ReferenceStats(
        len(bits), bits, dict(fragments), dict(scaffolds), fcd_mean, fcd_covariance
    )


def _as_reference(ref: Sequence[str] | ReferenceStats) -> ReferenceStats:
    return ref if isinstance(ref, ReferenceStats) else reference_stats(ref)


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
    return _internal_diversity(_distinct(gen), p)


def _internal_diversity(molecules: _Molecules, p: int) -> float:
    if not molecules.mols:
        return math.nan
    bits = _fingerprints(molecules.mols)
    weights = molecules.counts / molecules.counts.sum()
    per_molecule = _aggregate_tanimoto(bits, bits, agg="mean", p=p, ref_weights=weights)
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
    if any(with_hydrogens.HasSubstructMatch(pattern) for pattern in _filter_patterns()):
        return False
    smiles = Chem.MolToSmiles(mol, isomericSmiles=False)
    return bool(smiles) and Chem.MolFromSmiles(smiles) is not None


def fraction_passes_filters(gen: Sequence[str]) -> float:
    """Filters: the fraction of ``gen`` passing ``passes_filters``; invalid entries fail.

    nan for an empty list.
    """
    return _fraction_passes_filters(_distinct(gen))


def _fraction_passes_filters(molecules: _Molecules) -> float:
    from rdkit import rdBase

    total = molecules.counts.sum() + molecules.invalid
    if not total:
        return math.nan
    with rdBase.BlockLogs():
        passed = np.array([passes_filters(mol) for mol in molecules.mols], float)
    return float(passed @ molecules.counts / total)


def snn(gen: Sequence[str], ref: Sequence[str] | ReferenceStats) -> float:
    """SNN: mean over the valid molecules of ``gen`` of the Tanimoto similarity to the nearest
    molecule of ``ref`` (Morgan r=2 1024-bit fingerprints). nan if either has no valid molecule.
    """
    return _snn(_distinct(gen), _as_reference(ref))


def _snn(molecules: _Molecules, ref: ReferenceStats) -> float:
    if not molecules.mols or not ref.size:
        return math.nan
    nearest = _aggregate_tanimoto(_fingerprints(molecules.mols), ref.fingerprints, agg="max")
    return float(nearest @ molecules.counts / molecules.counts.sum())


def frag_similarity(gen: Sequence[str], ref: Sequence[str] | ReferenceStats) -> float:
    """Frag: cosine similarity of the BRICS fragment count vectors of ``gen`` and ``ref``.

    Each valid molecule is cut on its BRICS bonds (``FragmentOnBRICSBonds``) and every fragment's
    canonical SMILES (dummy atoms included) is counted over the set. nan if either count is empty.
    """
    return _frag_similarity(_distinct(gen), _as_reference(ref))


def _frag_similarity(molecules: _Molecules, ref: ReferenceStats) -> float:
    return _cosine(ref.fragments, _count(map(_fragments, molecules.mols), molecules.counts))


def scaffold_similarity(gen: Sequence[str], ref: Sequence[str] | ReferenceStats) -> float:
    """Scaf: cosine similarity of the Bemis-Murcko scaffold count vectors of ``gen`` and ``ref``.

    Scaffolds with fewer than 2 rings (and acyclic molecules) are not counted. nan if either
    count is empty.
    """
    return _scaffold_similarity(_distinct(gen), _as_reference(ref))


def _scaffold_similarity(molecules: _Molecules, ref: ReferenceStats) -> float:
    scaffolds = ([s] if s is not None else [] for s in map(_scaffold, molecules.mols))
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


def fcd(gen: Sequence[str], ref: Sequence[str] | ReferenceStats) -> float:
    """FCD: Frechet distance between Gaussians fitted to ChemNet activations of gen and ref.

    ``||mu_g - mu_r||^2 + Tr(S_g + S_r - 2 (S_g S_r)^(1/2))`` over the canonical SMILES of the
    valid molecules (duplicates included), as MOSES computes with fcd_torch; nan with fewer than 2
    molecules on either side. Needs the optional ``fcd`` package (and torch).

    Raises:
        MissingExtraError: fcd or torch is not installed.
    """
    _import_fcd()
    if isinstance(ref, ReferenceStats):
        if ref.fcd_mean is None and ref.size >= 2:
            raise SeqvaeError(
                "these ReferenceStats have no FCD statistics; "
                "build them with reference_stats(..., include_fcd=True)"
            )
        ref_statistics = ref.fcd_mean, ref.fcd_covariance
    else:
        ref_statistics = _chemnet_statistics(remove_invalid(ref))
    return _frechet_distance(_chemnet_statistics(remove_invalid(gen)), ref_statistics)


def _frechet_distance(gen_statistics: tuple, ref_statistics: tuple) -> float:
    (gen_mean, gen_covariance), (ref_mean, ref_covariance) = gen_statistics, ref_statistics
    if gen_mean is None or ref_mean is None:
        return math.nan
    distance = _import_fcd().calculate_frechet_distance(
        mu1=gen_mean, sigma1=gen_covariance, mu2=ref_mean, sigma2=ref_covariance
    )
    return float(distance)


# --- molecular properties -----------------------------------------------------------------------


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


_DEFAULT_REFERENCES: dict = {}


def _default_reference(split: str, include_fcd: bool, progress: Progress) -> ReferenceStats:
    """Statistics of a MOSES split, computed once per process (they take 1.5 minutes).

    The FCD statistics are MOSES's own precomputed ones (``{split}_stats.npz``), as MOSES uses.
    """
    if split not in _DEFAULT_REFERENCES:
        _DEFAULT_REFERENCES[split] = reference_stats(read_sequences(f"moses:{split}").texts, progress=progress)
    stats = _DEFAULT_REFERENCES[split]
    if include_fcd and stats.fcd_mean is None:
        path = moses_file("dataset", "data", f"{split}_stats.npz")
        # MOSES's own file: a pickled dict of numpy arrays and Counters
        fcd_stats = np.load(path, allow_pickle=True)["stats"].item()["FCD"]
        stats = dataclasses.replace(
            stats, fcd_mean=fcd_stats["mu"], fcd_covariance=fcd_stats["sigma"]
        )
        _DEFAULT_REFERENCES[split] = stats
    return stats


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
    """MOSES's ``get_all_metrics`` set (without the property Wasserstein distances).

    ``valid`` is computed on all of ``gen``; every other metric on its valid molecules as canonical
    SMILES (MOSES's ``remove_invalid``), duplicates kept. A reference left as None is MOSES's own
    split read from the molsets package, as in MOSES; pass ``reference_stats`` results to reuse
    precomputed references between calls.

    Args:
        gen: Generated SMILES.
        train: Training SMILES for Novelty (canonical, as MOSES's are).
        test: Test SMILES or their ``ReferenceStats``.
        test_scaffolds: Scaffold-split test SMILES or their ``ReferenceStats``.
        include_fcd: Compute FCD/Test and FCD/TestSF (needs the fcd extra).
        k: The sizes for unique@k.
        progress: Called with a status line before each step.
        notes: Gets one line per metric not computed (FCD without the extra) or computed on
            fewer molecules than asked (unique@k), each starting with the metric's name.

    Returns:
        {"valid", "unique@1000", "unique@10000", "FCD/Test", "SNN/Test", "Frag/Test", "Scaf/Test",
        "FCD/TestSF", "SNN/TestSF", "Frag/TestSF", "Scaf/TestSF", "IntDiv", "IntDiv2", "Filters",
        "Novelty"}: floats (nan where undefined). FCD values are None when not computed, with the
        reason in ``notes``.
    """
    from rdkit import rdBase

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
    metrics["valid"] = fraction_valid(gen)
    valid = remove_invalid(gen, canonize=True)
    with rdBase.BlockLogs():
        canonical = [canonical_smiles(s) for s in valid]  # MOSES canonicalizes a second time
    for size in k:
        if len(canonical) < size:
            notes.append(f"unique@{size}: only {len(canonical)} valid molecules, all of them used")
        metrics[f"unique@{size}"] = _unique_fraction(canonical[:size])
    molecules = _distinct(valid)
    if include_fcd:
        report("ChemNet activations of the generated molecules")
        gen_chemnet = _chemnet_statistics([s for s in canonical if s is not None])

    references = {"Test": test, "TestSF": test_scaffolds}
    for name, default_split in (("Test", "test"), ("TestSF", "test_scaffolds")):
        ref = references[name]
        if ref is None:
            report(f"reference {name}: MOSES {default_split} split (computed once per process)")
            ref = _default_reference(default_split, include_fcd, progress)
        elif not isinstance(ref, ReferenceStats):
            report(f"reference {name}: {len(ref)} SMILES")
            ref = reference_stats(ref, include_fcd=include_fcd, progress=progress)
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
    return metrics
