"""ChemNet activations for the FCD (the optional ``fcd`` package, with torch): their mean and
covariance, and the Frechet distance between two such Gaussians."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from seqvae.errors import SeqvaeError


FCD_HINT = "pip install torch==2.13.0 fcd==1.2.2 (or pip install 'seqvae[fcd]')"


class MissingExtraError(SeqvaeError):
    """An optional dependency (an ``extras_require`` group of seqvae) is not installed."""


def import_fcd() -> Any:
    try:
        import fcd  # noqa: F401  (imports torch)
    except ImportError as error:
        raise MissingExtraError(f"FCD needs the fcd extra ({error}); {FCD_HINT}") from None
    return fcd


def chemnet_statistics(smiles: Sequence[str]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Mean (512,) and covariance (512, 512) of ChemNet activations; Nones for < 2 molecules.

    Each SMILES is cut at its first ``.``, as MOSES's ChemNet encoder (fcd_torch) does, since it
    reads ``.`` as the end of the string; the ``fcd`` package would encode every fragment.
    """
    fcd_package = import_fcd()
    smiles = [text.split(".", 1)[0] for text in smiles]
    if len(smiles) < 2:
        return None, None
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    chemnet = fcd_package.load_ref_model()
    activations = fcd_package.get_predictions(chemnet, list(smiles), device=device)
    return activations.mean(0), np.cov(activations.T)


def frechet_distance(gen_statistics: tuple, ref_statistics: tuple) -> float:
    (gen_mean, gen_covariance), (ref_mean, ref_covariance) = gen_statistics, ref_statistics
    if gen_mean is None or ref_mean is None:
        return math.nan
    distance = import_fcd().calculate_frechet_distance(
        mu1=gen_mean, sigma1=gen_covariance, mu2=ref_mean, sigma2=ref_covariance
    )
    return float(distance)
