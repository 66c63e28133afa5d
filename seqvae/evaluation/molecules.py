"""What the MOSES metrics read of each molecule: canonical forms, Morgan fingerprints, BRICS
fragments, Bemis-Murcko scaffolds, MOSES's filters and four properties, computed once per distinct
molecule (on every core for many) and held as ``Molecules``."""

from __future__ import annotations

import csv
import dataclasses
import functools
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from seqvae import parallel
from seqvae.data.chemistry import canonical_smiles, to_mol
from seqvae.data.moses import moses_file

if TYPE_CHECKING:
    from rdkit.Chem import Mol


FINGERPRINT_BITS = 1024


FINGERPRINT_RADIUS = 2


ALLOWED_FILTER_ATOMS = frozenset({"C", "N", "S", "O", "F", "Cl", "Br", "H"})


Progress = Callable[[str], None] | None


MOLECULE_PARTS = ("fingerprints", "fragments", "scaffolds", "filters", "properties")


PROPERTY_NAMES = ("logP", "SA", "QED", "weight")  # MOSES's names, in get_all_metrics's order


PARALLEL_MIN_GENERATED = 500  # the same for generated molecules (filters, properties: ~10 ms each)


@dataclasses.dataclass(frozen=True, eq=False)
class Molecules:
    """Distinct valid molecules of a list, with how often each occurred and what the metrics
    need of each (``molecule_features``)."""

    smiles: list[str]  # per distinct canonical SMILES, its first occurrence as given
    counts: np.ndarray  # (U,) float64 occurrences of each
    invalid: int  # entries that did not parse
    features: dict  # the MOLECULE_PARTS computed: part -> one value per molecule


def distinct(smiles: Sequence[str], parts: Sequence[str] = (), progress: Progress = None,
              keys: Sequence[str | None] | None = None) -> Molecules:
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
        chunks = parallel.map_chunks(functools.partial(molecule_features, parts=tuple(parts)),
                                     distinct, progress or (lambda line: None), "generated",
                                     PARALLEL_MIN_GENERATED)
        for part in parts:
            if part == "fingerprints":
                features[part] = np.concatenate([c[part] for c in chunks])
            elif part == "properties":
                features[part] = {name: np.concatenate([c[part][name] for c in chunks])
                                  for name in PROPERTY_NAMES}
            else:
                features[part] = [value for c in chunks for value in c[part]]
    return Molecules(distinct, np.array([counts[k] for k in first], float), invalid, features)


def canonical_twice(smiles: Sequence[str]) -> list[tuple[str, str | None]]:
    """For each valid SMILES of ``smiles`` in order (invalid ones left out), its canonical form
    and that form canonicalized again: MOSES's ``remove_invalid``, then the ``canonic_smiles``
    its metrics apply to the result. Runs in worker processes too."""
    from rdkit import rdBase

    with rdBase.BlockLogs():
        once = [form for form in map(canonical_smiles, smiles) if form is not None]
        return [(form, canonical_smiles(form)) for form in once]


def molecule_features(smiles: Sequence[str], parts: tuple[str, ...]) -> dict:
    """Of each molecule of ``smiles`` (valid SMILES), the ``parts`` asked for: ``fingerprints``
    (N, 128) packed bits, ``fragments`` (a list each), ``scaffolds`` (str or None each),
    ``filters`` (N,) bool (``passes_filters``), ``properties`` {PROPERTY_NAMES: (N,)}.

    Runs in worker processes too, so it takes and returns only plain picklable values.
    """
    from rdkit import rdBase

    with rdBase.BlockLogs():
        return mol_features([to_mol(s) for s in smiles], parts)


def mol_features(mols: Sequence[Mol], parts: Sequence[str]) -> dict:
    """``molecule_features`` of parsed molecules (the reference statistics use it too)."""
    features: dict[str, Any] = {}
    if "fingerprints" in parts:
        features["fingerprints"] = fingerprints(mols)
    if "fragments" in parts:
        features["fragments"] = [fragments(mol) for mol in mols]
    if "scaffolds" in parts:
        features["scaffolds"] = [scaffold(mol) for mol in mols]
    if "filters" in parts:
        features["filters"] = np.array([passes_filters(mol) for mol in mols], bool)
    if "properties" in parts:
        features["properties"] = {name: np.array([function(mol) for mol in mols], float)
                                  for name, function in property_functions().items()}
    return features


def fingerprints(mols: Sequence[Mol]) -> np.ndarray:
    """Morgan bits of each molecule, packed: (N, FINGERPRINT_BITS // 8) uint8."""
    from rdkit.Chem import rdFingerprintGenerator

    generator = rdFingerprintGenerator.GetMorganGenerator(
        radius=FINGERPRINT_RADIUS, fpSize=FINGERPRINT_BITS
    )
    packed = np.zeros((len(mols), FINGERPRINT_BITS // 8), np.uint8)
    for row, mol in enumerate(mols):
        packed[row] = np.packbits(generator.GetFingerprintAsNumPy(mol))
    return packed


def fragments(mol: Mol) -> list[str]:
    from rdkit import Chem

    return Chem.MolToSmiles(Chem.FragmentOnBRICSBonds(mol)).split(".")


def scaffold(mol: Mol, min_rings: int = 2) -> str | None:
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


def property_functions() -> dict[str, Callable]:
    from seqvae.data import chemistry

    return {"logP": chemistry.logp, "SA": chemistry.sa_score, "QED": chemistry.qed,
            "weight": chemistry.molecular_weight}


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
    patterns = filter_patterns()
    if any(with_hydrogens.HasSubstructMatch(patterns[i])
           for i in filter_candidates(with_hydrogens)):
        return False
    smiles = Chem.MolToSmiles(mol, isomericSmiles=False)
    return bool(smiles) and Chem.MolFromSmiles(smiles) is not None


_FILTERS: list = []


def filter_patterns() -> list:
    """The MCF and PAINS SMARTS of MOSES, parsed once."""
    if not _FILTERS:
        from rdkit import Chem

        with open(moses_file("metrics", "mcf.csv"), newline="") as f:
            smarts = [row["smarts"] for row in csv.DictReader(f)]
        with open(moses_file("metrics", "wehi_pains.csv"), newline="") as f:
            smarts += [row[0].strip() for row in csv.reader(f) if row]
        _FILTERS.extend(p for p in map(Chem.MolFromSmarts, smarts) if p is not None)
    return _FILTERS


def packed_pattern_fingerprint(mol: Mol) -> np.ndarray:
    """RDKit's pattern fingerprint (2,048 bits, made for substructure screening) as ``(32,)``
    uint64 words."""
    from rdkit import Chem, DataStructs

    bits = np.zeros(2048, np.uint8)
    DataStructs.ConvertToNumpyArray(Chem.PatternFingerprint(mol, fpSize=2048), bits)
    return np.packbits(bits).view(np.uint64)


@functools.lru_cache(maxsize=1)
def filter_fingerprints() -> np.ndarray:
    """``(P, 32)`` uint64: the pattern fingerprint of each filter SMARTS."""
    return np.stack([packed_pattern_fingerprint(p) for p in filter_patterns()])


def filter_candidates(mol: Mol) -> np.ndarray:
    """Indices of the filter patterns that ``mol`` can contain: every bit of a pattern's pattern
    fingerprint is set in a molecule that contains it (RDKit's substructure screen, the one its
    ``SubstructLibrary`` uses), so only these need ``HasSubstructMatch``: about 25 of the 502 on
    MOSES-like molecules, the same verdicts about 4x faster (``bench/filter_screen.py`` checks
    them on MOSES's test sets)."""
    patterns = filter_fingerprints()
    words = packed_pattern_fingerprint(mol)
    return np.flatnonzero(((patterns & words) == patterns).all(axis=1))
