"""Molecules through RDKit: parsing, canonical SMILES, validity, and the properties seqvae
reports (logP, QED, molecular weight, SA score). RDKit is imported lazily by each function."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Sequence

from seqvae.errors import SeqvaeError

if TYPE_CHECKING:
    from rdkit.Chem import Mol


def invalid_smiles(texts: Sequence[str]) -> list[int]:
    """Indices of texts that RDKit cannot parse as SMILES."""
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    return [i for i, text in enumerate(texts) if Chem.MolFromSmiles(text) is None]


def to_mol(smiles: str | Mol) -> Mol | None:
    """Parses a SMILES string into a sanitized RDKit molecule (MOSES ``get_mol``).

    Args:
        smiles: A SMILES string, or an RDKit ``Mol``, which is returned unchanged.

    Returns:
        The molecule, or None when the string is empty, does not parse, or fails sanitization.
    """
    from rdkit import Chem

    if not isinstance(smiles, str):
        return smiles
    if not smiles:
        return None
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        return None
    try:
        Chem.SanitizeMol(mol)
    except ValueError:
        return None
    return mol


_AROMATIC_ATOM = re.compile(r"\[\d*(?:[bcnops]|se|as|te)|(?<![A-Z])[bcnops]")


def kekule_smiles(smiles: str) -> str | None:
    """The molecule as Kekule SMILES (explicit double bonds, no aromatic atoms), or None if it
    is invalid or does not kekulize. Text without aromatic atoms comes back unchanged."""
    if not _AROMATIC_ATOM.search(smiles):
        return smiles
    from rdkit import Chem, rdBase

    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(smiles)
        return None if mol is None else _kekule_of(mol)


def checked_kekule_smiles(texts: Sequence[str]) -> tuple[list[int], list[str | None]]:
    """``invalid_smiles`` and ``kekule_smiles`` of every text from one RDKit parse each.

    Returns:
        The indices of the texts that are not valid SMILES, and each text's Kekule SMILES (None
        where it is invalid or does not kekulize).
    """
    from rdkit import Chem, rdBase

    invalid, kekule = [], []
    with rdBase.BlockLogs():
        for i, text in enumerate(texts):
            mol = Chem.MolFromSmiles(text)
            if mol is None:
                invalid.append(i)
            kekule.append(None if mol is None else _kekule_of(mol)
                          if _AROMATIC_ATOM.search(text) else text)
    return invalid, kekule


def kekule_forms(texts: Sequence[str]) -> list[str | None]:
    """Each text's Kekule SMILES (None where invalid or not kekulizable): ``checked_kekule_smiles``'
    second half, for chunks on worker processes (``seqvae.parallel.map_chunks``)."""
    return checked_kekule_smiles(texts)[1]


def _kekule_of(mol: Mol) -> str | None:
    from rdkit import Chem

    try:
        Chem.Kekulize(mol, clearAromaticFlags=True)
    except Exception:  # noqa: BLE001 - RDKit raises KekulizeException and friends
        return None
    return Chem.MolToSmiles(mol, kekuleSmiles=True)


def canonical_smiles(smiles: str | Mol) -> str | None:
    """RDKit's canonical SMILES of a molecule (MOSES ``canonic_smiles``), None if invalid."""
    from rdkit import Chem

    mol = to_mol(smiles)
    return None if mol is None else Chem.MolToSmiles(mol)


def canonical_or_as_is(texts: Sequence[str]) -> list[str]:
    """Each text as RDKit's canonical SMILES where it is a molecule, else unchanged (so that an
    invalid sample still counts as one)."""
    from rdkit import rdBase

    with rdBase.BlockLogs():
        return [canonical_smiles(text) or text for text in texts]


def remove_invalid(gen: Sequence[str], canonize: bool = True) -> list[str]:
    """The valid molecules of ``gen`` in order, as canonical SMILES if ``canonize`` (MOSES)."""
    from rdkit import rdBase

    with rdBase.BlockLogs():
        if canonize:
            return [s for s in map(canonical_smiles, gen) if s is not None]
        return [s for s in gen if to_mol(s) is not None]


def _valid_mol(smiles: str | Mol) -> Mol:
    mol = to_mol(smiles)
    if mol is None:
        raise SeqvaeError(f"not a valid molecule: {smiles!r}")
    return mol


def logp(smiles: str | Mol) -> float:
    """Wildman-Crippen logP (RDKit ``Crippen.MolLogP``) of a SMILES string or Mol."""
    from rdkit.Chem import Crippen

    return Crippen.MolLogP(_valid_mol(smiles))


def qed(smiles: str | Mol) -> float:
    """Quantitative estimate of drug-likeness (RDKit ``QED.qed``), in [0, 1]."""
    from rdkit.Chem import QED

    return QED.qed(_valid_mol(smiles))


def molecular_weight(smiles: str | Mol) -> float:
    """Average molecular weight in daltons, hydrogens included (RDKit ``Descriptors.MolWt``)."""
    from rdkit.Chem import Descriptors

    return Descriptors.MolWt(_valid_mol(smiles))


def sa_score(smiles: str | Mol) -> float:
    """Synthetic accessibility score (Ertl & Schuffenhauer 2009), 1 (easy) to 10 (hard).

    Uses RDKit Contrib's ``sascorer``, the same algorithm and fragment table MOSES ships.
    """
    return _sascorer().calculateScore(_valid_mol(smiles))


def _sascorer() -> Any:
    try:
        from rdkit.Contrib.SA_Score import sascorer
    except ImportError:
        import importlib.util

        from rdkit import RDConfig

        path = os.path.join(RDConfig.RDContribDir, "SA_Score", "sascorer.py")
        if not os.path.exists(path):
            raise SeqvaeError(f"RDKit's SA_Score Contrib module is missing ({path})") from None
        spec = importlib.util.spec_from_file_location("sascorer", path)
        sascorer = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sascorer)
    return sascorer
