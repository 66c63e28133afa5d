"""Molecules as the explorer shows them: RDKit SVG drawings, the properties the map is coloured
by, and Tanimoto similarity to a selected molecule. RDKit is imported inside each function."""

from __future__ import annotations

import base64
from typing import Sequence

import numpy as np

from seqvae.data import chemistry

# Properties computed for every map point, as (key, label, function of a valid Mol).
PROPERTIES = (("logp", "logP", chemistry.logp), ("qed", "QED", chemistry.qed),
              ("sa", "SA score", chemistry.sa_score))
# Morgan fingerprints as MOSES and seqvae.evaluation.moses_metrics use them.
FINGERPRINT_RADIUS, FINGERPRINT_BITS = 2, 1024


def molecule_svg(smiles: str, width: int = 220, height: int = 160) -> str | None:
    """An SVG drawing of the molecule (RDKit ``MolDraw2DSVG``), or None when it is invalid."""
    from rdkit import rdBase
    from rdkit.Chem.Draw import rdMolDraw2D

    with rdBase.BlockLogs():
        mol = chemistry.to_mol(smiles)
        if mol is None:
            return None
        drawer = rdMolDraw2D.MolDraw2DSVG(width, height)
        drawer.drawOptions().clearBackground = False
        try:
            rdMolDraw2D.PrepareAndDrawMolecule(drawer, mol)
        except (ValueError, RuntimeError):  # a sanitized molecule RDKit still cannot lay out
            return None
        drawer.FinishDrawing()
        return drawer.GetDrawingText()


def data_uri(svg: str) -> str:
    """An ``<img src=...>`` value for an SVG document."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()


def is_valid(smiles: str) -> bool:
    from rdkit import rdBase

    with rdBase.BlockLogs():
        return chemistry.to_mol(smiles) is not None


def canonical(smiles: str) -> str | None:
    from rdkit import rdBase

    with rdBase.BlockLogs():
        return chemistry.canonical_smiles(smiles)


def properties(smiles: Sequence[str]) -> dict[str, np.ndarray]:
    """float32 ``(N,)`` per key of ``PROPERTIES``; NaN where a molecule is invalid."""
    from rdkit import rdBase

    values = {key: np.full(len(smiles), np.nan, np.float32) for key, _, _ in PROPERTIES}
    with rdBase.BlockLogs():
        for i, text in enumerate(smiles):
            mol = chemistry.to_mol(text)
            if mol is None:
                continue
            for key, _, function in PROPERTIES:
                values[key][i] = function(mol)
    return values


def similarities(reference: str, smiles: Sequence[str]) -> list[float | None]:
    """Tanimoto similarity (Morgan r=2, 1024 bits) of each molecule to ``reference``; None for
    an invalid molecule (or all None when the reference is invalid)."""
    from rdkit import DataStructs, rdBase
    from rdkit.Chem import rdFingerprintGenerator

    generator = rdFingerprintGenerator.GetMorganGenerator(radius=FINGERPRINT_RADIUS,
                                                          fpSize=FINGERPRINT_BITS)
    with rdBase.BlockLogs():
        ref = chemistry.to_mol(reference)
        if ref is None:
            return [None] * len(smiles)
        ref_fp = generator.GetFingerprint(ref)
        result = []
        for text in smiles:
            mol = chemistry.to_mol(text)
            result.append(None if mol is None else
                          DataStructs.TanimotoSimilarity(ref_fp, generator.GetFingerprint(mol)))
    return result


def rdkit_values(name: str, smiles: Sequence[str]) -> list[float | None]:
    """The property ``name`` of each molecule as RDKit computes it
    (``seqvae.data.properties.rdkit_properties``); None for an invalid molecule, or for all when
    RDKit does not compute ``name`` (a column property such as ``col:pIC50``)."""
    from seqvae.data import properties as props

    if name not in props.RDKIT_PROPERTIES:
        return [None] * len(smiles)
    return [None if v != v else float(v) for v in props.rdkit_properties(smiles, [name])[:, 0]]
