"""Molecular properties as data: computed with RDKit or read from numeric CSV columns.

Names (``--properties logp,qed,sa,plogp,mw,col:pIC50``):

- ``logp``: Wildman-Crippen logP (``chemistry.logp``).
- ``qed``: quantitative estimate of drug-likeness, in [0, 1] (``chemistry.qed``).
- ``sa``: synthetic accessibility, 1 (easy) to 10 (hard), RDKit Contrib ``sascorer``.
- ``plogp``: penalized logP of JT-VAE (``penalized_logp``), the score of the constrained
  optimisation benchmark.
- ``mw``: average molecular weight in daltons.
- ``col:NAME``: the numbers in column ``NAME`` of the CSV/TSV the molecules are read from.

A molecule RDKit cannot parse, and an empty cell of a ``col:`` column, give NaN; callers report
and leave out those rows. Text that is not a number in a ``col:`` column is an error naming
the file and line.
"""

from __future__ import annotations

import csv
import functools
import os
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from seqvae import parallel
from seqvae.data import chemistry
from seqvae.data.moses import is_moses
from seqvae.errors import SeqvaeError

RDKIT_PROPERTIES = ("logp", "qed", "sa", "plogp", "mw")
COLUMN_PREFIX = "col:"

# GCPN (You et al. 2018) standardises each term of penalized logP by its mean and standard
# deviation over ZINC-250k (250k_rndm_zinc_drugs_clean.smi); JT-VAE's benchmark file
# (opt.test.logP-SA) and its published improvements use the raw sum.
PLOGP_STANDARDISATION = {"logp": (2.4570953396190123, 1.434324401111988),
                         "sa": (-3.0525811293166134, 0.8335207024513095),
                         "cycle": (-0.0485696876403053, 0.2860212110245455)}


def largest_cycle_penalty(mol) -> int:
    """``max(0, largest cycle - 6)``, cycles from networkx's cycle basis of the heavy-atom
    graph, exactly as JT-VAE and GCPN compute it (a fused system's basis can hold a cycle
    larger than its smallest rings, and the published values include that)."""
    import networkx as nx
    from rdkit import Chem

    cycles = nx.cycle_basis(nx.Graph(Chem.rdmolops.GetAdjacencyMatrix(mol)))
    largest = max((len(cycle) for cycle in cycles), default=0)
    return max(0, largest - 6)


def penalized_logp(smiles, standardised: bool = False) -> float:
    """Penalized logP (Kusner et al. 2017; JT-VAE, Jin et al. 2018; GCPN, You et al. 2018).

    ``logP - SA - max(0, largest cycle - 6)``: Crippen logP, the SA score, and the size above
    six atoms of the largest cycle of networkx's cycle basis. This raw sum is what JT-VAE's
    ``opt.test.logP-SA`` lists (e.g. -2.50504567445 for ``COc1cc2c(cc1OC)CC([NH3+])C2``).

    ``standardised``: GCPN's form, each term standardised with ZINC-250k statistics,
    ``(logP - 2.4571) / 1.4343 + (-SA + 3.0526) / 0.8335 + (-cycle + 0.0486) / 0.2860``
    (full constants in ``PLOGP_STANDARDISATION``).

    Args:
        smiles: a SMILES string or RDKit Mol.
    """
    mol = chemistry.to_mol(smiles)
    if mol is None:
        raise SeqvaeError(f"not a valid molecule: {smiles!r}")
    terms = {"logp": chemistry.logp(mol), "sa": -chemistry.sa_score(mol),
             "cycle": -float(largest_cycle_penalty(mol))}
    if not standardised:
        return terms["logp"] + terms["sa"] + terms["cycle"]
    return sum((value - PLOGP_STANDARDISATION[name][0]) / PLOGP_STANDARDISATION[name][1]
               for name, value in terms.items())


_FUNCTIONS: dict[str, Callable] = {"logp": chemistry.logp, "qed": chemistry.qed,
                                   "sa": chemistry.sa_score, "plogp": penalized_logp,
                                   "mw": chemistry.molecular_weight}


def parse_property_names(text: str | Sequence[str]) -> tuple[str, ...]:
    """``"logp,qed,col:pIC50"`` -> ``("logp", "qed", "col:pIC50")``; unknown names are errors."""
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text)]
    names = [n for n in names if n]
    if not names:
        raise SeqvaeError("properties: none named; choose from "
                          f"{', '.join(RDKIT_PROPERTIES)} or col:COLUMN")
    for name in names:
        if name not in RDKIT_PROPERTIES and not (name.startswith(COLUMN_PREFIX)
                                                 and len(name) > len(COLUMN_PREFIX)):
            raise SeqvaeError(f"properties: unknown property {name!r}; choose from "
                              f"{', '.join(RDKIT_PROPERTIES)} or col:COLUMN (a numeric CSV column)")
    if len(set(names)) != len(names):
        raise SeqvaeError(f"properties: a property is named twice ({', '.join(names)})")
    return tuple(names)


def rdkit_property(name: str) -> Callable[[str], float]:
    """The RDKit function of a property name (``logp``, ..., ``mw``): SMILES or Mol -> float."""
    if name not in _FUNCTIONS:
        raise SeqvaeError(f"{name!r} is not a property RDKit computes (choose from "
                          f"{', '.join(RDKIT_PROPERTIES)})")
    return _FUNCTIONS[name]


def rdkit_properties(texts: Sequence[str], names: Sequence[str],
                     progress: Callable[[str], None] | None = None) -> np.ndarray:
    """float64 ``(N, P)``: each RDKit property of each SMILES; NaN rows for invalid molecules.

    From ``_PARALLEL_MIN`` molecules on, chunks are computed on every core
    (``seqvae.parallel``); ``progress`` gets a line per chunk.
    """
    names = tuple(names)
    for name in names:
        rdkit_property(name)  # an unknown name fails here, in this process
    chunks = parallel.map_chunks(functools.partial(_properties_of_chunk, names=names), list(texts),
                                 progress or (lambda line: None), "properties", _PARALLEL_MIN)
    return np.concatenate(chunks).reshape(len(texts), len(names))


_PARALLEL_MIN = 5000  # molecules below which worker processes cost more than they save


def _properties_of_chunk(texts: Sequence[str], names: tuple[str, ...]) -> np.ndarray:
    """``rdkit_properties`` of one chunk, in this process (a worker's job)."""
    from rdkit import rdBase

    functions = [rdkit_property(name) for name in names]
    values = np.full((len(texts), len(functions)), np.nan)
    with rdBase.BlockLogs():
        for row, text in enumerate(texts):
            mol = chemistry.to_mol(text)
            if mol is not None:
                values[row] = [function(mol) for function in functions]
    return values


@dataclass(frozen=True)
class PropertyTable:
    """Molecules and their properties: ``values[i, j]`` is property ``names[j]`` of ``texts[i]``
    (NaN when unknown)."""

    texts: list[str]
    names: tuple[str, ...]
    values: np.ndarray  # float64 (N, P)
    line_numbers: list[int]
    source: str

    def nan_rows(self) -> np.ndarray:
        """bool ``(N,)``: rows with any unknown property."""
        return np.isnan(self.values).any(axis=1)

    def nan_note(self) -> str | None:
        """One line naming how many rows (and the first lines) have an unknown property."""
        bad = np.flatnonzero(self.nan_rows())
        if not len(bad):
            return None
        lines = ", ".join(str(self.line_numbers[i]) for i in bad[:5])
        return (f"{self.source}: {len(bad)} of {len(self.texts)} rows have no value for a property "
                f"(invalid molecule or empty cell; lines {lines}{', ...' if len(bad) > 5 else ''}); "
                "left out")


def read_property_table(source, names: Sequence[str], column: str = "SMILES",
                        limit: int = 0,
                        known: Mapping[str, np.ndarray] | None = None) -> PropertyTable:
    """Reads molecules from ``source`` (as ``sources.read_sequences``) with their properties.

    RDKit properties are computed, except for molecules in ``known`` (text -> the values of
    ``names``, float64 ``(P,)``, e.g. from an earlier table); ``col:NAME`` properties are read
    from the CSV/TSV ``source`` (rows with an empty molecule cell are skipped, as
    ``read_sequences`` does).

    Raises:
        SeqvaeError: one line for a ``col:`` property of a source that is not a table, a
            missing column, or a cell that is not a number.
    """
    from seqvae.data.sources import read_sequences

    names = parse_property_names(names)
    seqs = read_sequences(source, column, limit)
    values = np.full((len(seqs.texts), len(names)), np.nan)
    computed = [i for i, name in enumerate(names) if not name.startswith(COLUMN_PREFIX)]
    if computed:
        known = known or {}
        todo = []
        for row, text in enumerate(seqs.texts):
            if text in known:
                values[row, computed] = known[text][computed]
            else:
                todo.append(row)
        if todo:
            values[np.ix_(todo, computed)] = rdkit_properties(
                [seqs.texts[row] for row in todo], [names[i] for i in computed])
    columns = [i for i, name in enumerate(names) if name.startswith(COLUMN_PREFIX)]
    if columns:
        read = read_numeric_columns(source, column, [names[i][len(COLUMN_PREFIX):] for i in columns],
                                    limit)
        values[:, columns] = read
    return PropertyTable(seqs.texts, names, values, seqs.line_numbers, seqs.source)


def read_numeric_columns(path, column: str, wanted: Sequence[str], limit: int = 0) -> np.ndarray:
    """float64 ``(N, len(wanted))``: numeric columns of a CSV/TSV, one row per non-empty
    ``column`` cell (the rows ``read_sequences`` keeps); empty cells are NaN."""
    if not isinstance(path, (str, os.PathLike)) or is_moses(str(path)):
        raise SeqvaeError(f"col:{wanted[0]}: column properties need a .csv or .tsv file of "
                          f"molecules, not {path if isinstance(path, str) else 'a list'}")
    path = os.fspath(path)
    name = path[:-3] if path.endswith(".gz") else path
    if not name.endswith((".csv", ".tsv")):
        raise SeqvaeError(f"{path}: col:{wanted[0]} needs a .csv or .tsv file with a header")
    from seqvae.data.sources import _open_text

    rows = []
    with _open_text(path) as handle:
        reader = csv.reader(handle, delimiter="\t" if name.endswith(".tsv") else ",")
        header = next(reader, None) or []
        for want in wanted:
            if want not in header:
                raise SeqvaeError(f"{path}:1: no column '{want}' for col:{want} (columns: "
                                  f"{', '.join(header[:10])})")
        key, indices = header.index(column), [header.index(want) for want in wanted]
        start = reader.line_num + 1
        for row in reader:
            line, start = start, reader.line_num + 1
            if len(row) <= key or not row[key].strip():
                continue
            rows.append([_number(row, i, header[i], path, line) for i in indices])
            if limit and len(rows) >= limit:
                break
    return np.array(rows, np.float64).reshape(len(rows), len(wanted))


def _number(row: list[str], index: int, name: str, path: str, line: int) -> float:
    cell = row[index].strip() if index < len(row) else ""
    if not cell:
        return float("nan")
    try:
        value = float(cell)
    except ValueError:
        raise SeqvaeError(f"{path}:{line}: column '{name}' holds {cell!r}, not a number") from None
    if not np.isfinite(value):
        raise SeqvaeError(f"{path}:{line}: column '{name}' holds {cell!r}, not a finite number")
    return value


def standardisation(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, std)``, float64 ``(P,)``, over the known values of each column (std 1 where a
    column is constant, so standardising never divides by zero)."""
    mean = np.nanmean(values, axis=0)
    std = np.nanstd(values, axis=0)
    return mean, np.where(std > 0, std, 1.0)


def morgan_fingerprint(smiles, radius: int = 2, bits: int = 2048):
    """Morgan (ECFP4-like for radius 2) bit vector of a SMILES or Mol, None if invalid: the
    fingerprint of the similarity constraint in JT-VAE's optimisation benchmark."""
    from rdkit.Chem import rdFingerprintGenerator

    mol = chemistry.to_mol(smiles)
    if mol is None:
        return None
    return rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=bits).GetFingerprint(mol)


def tanimoto(a, b) -> float:
    """Tanimoto similarity of two fingerprints (``morgan_fingerprint``); 0 if either is None."""
    from rdkit import DataStructs

    return 0.0 if a is None or b is None else DataStructs.TanimotoSimilarity(a, b)
