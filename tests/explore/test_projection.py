"""seqvae.explore.projection: PCA by SVD on hand-made points, its save/load round trip, UMAP's
hint when umap-learn is missing."""

import sys

import numpy as np
import pytest

from seqvae.errors import SeqvaeError
from seqvae.explore import projection


def _points():
    """Points spread 10x more along (1, 1, 0) than along (0, 0, 1), and not at all along the rest."""
    rng = np.random.default_rng(0)
    first, second = rng.standard_normal((2, 200))
    axis = np.array([1.0, 1.0, 0.0, 0.0]) / np.sqrt(2)
    return 10 * first[:, None] * axis + second[:, None] * np.array([0, 0, 1.0, 0]) + 5.0


def test_pca_finds_the_directions_of_largest_variance():
    fitted = projection.PCAProjection.fit(_points())
    np.testing.assert_allclose(np.abs(fitted.components[0]), [2 ** -0.5, 2 ** -0.5, 0, 0], atol=1e-2)
    np.testing.assert_allclose(np.abs(fitted.components[1]), [0, 0, 1, 0], atol=1e-2)
    assert fitted.explained[0] > 0.98 and fitted.explained.sum() == pytest.approx(1.0, abs=1e-6)
    assert fitted.axis_titles() == (f"PC1 ({100 * fitted.explained[0]:.1f}% of variance)",
                                    f"PC2 ({100 * fitted.explained[1]:.1f}% of variance)")


def test_pca_places_points_and_is_the_same_on_a_refit():
    z = _points()
    fitted = projection.PCAProjection.fit(z)
    coords = fitted.transform(z)
    assert coords.shape == (200, 2) and coords.dtype == np.float32
    np.testing.assert_allclose(coords.mean(0), 0, atol=1e-4)  # centred on the fitted points
    # the sign convention makes the largest entry of each axis positive: a refit on the points
    # in another order gives the same map
    again = projection.PCAProjection.fit(z[::-1])
    np.testing.assert_allclose(again.transform(z), coords, atol=1e-4)
    assert (fitted.components[np.arange(2), np.abs(fitted.components).argmax(1)] > 0).all()


def test_pca_of_one_dimensional_points_has_a_zero_second_axis():
    z = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    coords = projection.PCAProjection.fit(z).transform(z)
    np.testing.assert_allclose(coords[:, 0], [-2 ** 0.5, 0, 2 ** 0.5], atol=1e-5)
    np.testing.assert_allclose(coords[:, 1], 0, atol=1e-5)


def test_pca_round_trips_through_its_file(tmp_path):
    z = _points()
    fitted = projection.fit_projection("pca", z)
    path = projection.projection_file(str(tmp_path), "key", "pca")
    fitted.save(path)
    loaded = projection.load_projection(path, "pca")
    np.testing.assert_array_equal(loaded.transform(z), fitted.transform(z))


def test_bad_requests_are_one_line_errors(monkeypatch):
    with pytest.raises(SeqvaeError, match="at least 2 points"):
        projection.PCAProjection.fit(np.zeros((1, 4)))
    with pytest.raises(SeqvaeError, match="unknown projection 'tsne'"):
        projection.fit_projection("tsne", _points())
    monkeypatch.setitem(sys.modules, "umap", None)  # as if umap-learn were not installed
    with pytest.raises(SeqvaeError, match="pip install umap-learn"):
        projection.fit_projection("umap", _points())


def test_umap_fits_places_new_points_and_round_trips(tmp_path):
    if not hasattr(pytest.importorskip("umap", reason="umap-learn is not installed (optional)"),
                   "UMAP"):
        pytest.skip("umap-learn is not installed (optional)")
    z = _points()[:60].astype(np.float32)
    fitted = projection.fit_projection("umap", z)
    coords = fitted.transform(z[:5])
    assert coords.shape == (5, 2) and np.isfinite(coords).all()
    path = projection.projection_file(str(tmp_path), "key", "umap")
    assert path.endswith(".pkl")
    fitted.save(path)
    np.testing.assert_allclose(projection.load_projection(path, "umap").transform(z[:5]), coords,
                               atol=1e-3)
