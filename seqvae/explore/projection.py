"""2-D projections of latent means for the explorer's map: PCA (numpy SVD, always there) or
UMAP (when ``umap-learn`` is installed). A fitted projection also places new points (decoded
neighbours, interpolation paths, samples) on the same map."""

from __future__ import annotations

import os
import pickle

import numpy as np

from seqvae.errors import SeqvaeError
from seqvae.files import atomic_path

METHODS = ("pca", "umap")


class PCAProjection:
    """The first two principal axes of the fitted points.

    Attributes:
        mean: float32 ``(L,)`` the mean of the fitted points.
        components: float32 ``(2, L)`` the unit principal axes, largest variance first; each
            axis's sign makes its largest-magnitude entry positive, so a refit gives the same map.
        explained: float ``(2,)`` the fraction of the total variance along each axis.
    """

    method = "pca"

    def __init__(self, mean: np.ndarray, components: np.ndarray, explained: np.ndarray):
        self.mean, self.components, self.explained = mean, components, explained

    @classmethod
    def fit(cls, z: np.ndarray) -> "PCAProjection":
        """Fits on ``z (N, L)``, N >= 2."""
        z = np.asarray(z, np.float64)
        if z.ndim != 2 or len(z) < 2:
            raise SeqvaeError(f"a projection needs at least 2 points, got {len(z)}")
        mean = z.mean(0)
        _, singular, vt = np.linalg.svd(z - mean, full_matrices=False)
        components = np.zeros((2, z.shape[1]))
        rows = min(2, len(vt))
        components[:rows] = vt[:rows]
        signs = np.sign(components[np.arange(2), np.abs(components).argmax(1)])
        components *= np.where(signs == 0, 1.0, signs)[:, None]
        variance = singular ** 2
        explained = np.zeros(2)
        explained[:rows] = variance[:rows] / max(variance.sum(), 1e-30)
        return cls(mean.astype(np.float32), components.astype(np.float32), explained)

    def transform(self, z: np.ndarray) -> np.ndarray:
        """``z (N, L)`` -> float32 ``(N, 2)`` map coordinates."""
        return ((np.asarray(z, np.float32) - self.mean) @ self.components.T).astype(np.float32)

    def axis_titles(self) -> tuple[str, str]:
        return tuple(f"PC{i + 1} ({100 * e:.1f}% of variance)" for i, e in enumerate(self.explained))

    def save(self, path: str) -> None:
        with atomic_path(path, suffix=".npz") as tmp:
            np.savez(tmp, mean=self.mean, components=self.components, explained=self.explained)

    @classmethod
    def load(cls, path: str) -> "PCAProjection":
        with np.load(path) as stored:
            return cls(stored["mean"], stored["components"], stored["explained"])


class UMAPProjection:
    """A fitted ``umap.UMAP`` (2 components, a fixed random state), kept whole so that it can
    place new points with ``transform``."""

    method = "umap"

    def __init__(self, reducer):
        self.reducer = reducer

    @classmethod
    def fit(cls, z: np.ndarray, seed: int = 0) -> "UMAPProjection":
        umap = require_umap()
        reducer = umap.UMAP(n_components=2, random_state=seed,
                            n_neighbors=min(15, max(2, len(z) - 1)))
        reducer.fit(np.asarray(z, np.float32))
        return cls(reducer)

    def transform(self, z: np.ndarray) -> np.ndarray:
        return np.asarray(self.reducer.transform(np.asarray(z, np.float32)), np.float32)

    def axis_titles(self) -> tuple[str, str]:
        return ("UMAP 1", "UMAP 2")

    def save(self, path: str) -> None:
        with atomic_path(path, suffix=".pkl") as tmp:
            with open(tmp, "wb") as out:
                pickle.dump(self.reducer, out)

    @classmethod
    def load(cls, path: str) -> "UMAPProjection":
        require_umap()
        with open(path, "rb") as handle:
            return cls(pickle.load(handle))  # noqa: S301 - a file this run directory wrote


def require_umap():
    """The ``umap`` module, or a one-line error saying how to get it."""
    try:
        import umap
    except ImportError:
        umap = None
    if not hasattr(umap, "UMAP"):  # also a leftover folder that imports as an empty namespace
        raise SeqvaeError("the umap projection needs umap-learn: pip install umap-learn")
    return umap


def fit_projection(method: str, z: np.ndarray):
    """A fitted ``PCAProjection`` or ``UMAPProjection`` of ``z (N, L)``."""
    if method not in METHODS:
        raise SeqvaeError(f"unknown projection {method!r}; choose one of {', '.join(METHODS)}")
    return PCAProjection.fit(z) if method == "pca" else UMAPProjection.fit(z)


def projection_file(folder: str, key: str, method: str) -> str:
    return os.path.join(folder, f"projection-{key}.{'npz' if method == 'pca' else 'pkl'}")


def load_projection(path: str, method: str):
    return PCAProjection.load(path) if method == "pca" else UMAPProjection.load(path)
