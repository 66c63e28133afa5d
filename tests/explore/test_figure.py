"""seqvae.explore.figure: the map's traces from a hand-made map and hand-made shown sets."""

import numpy as np
import pytest

from seqvae.explore import figure
from seqvae.explore.latent_map import LatentMap
from seqvae.explore.projection import PCAProjection

ROWS = [{"smiles": "CCO", "valid": True, "similarity": 1.0, "x": 0.5, "y": -1.0, "t": 0.0},
        {"smiles": "C1C", "valid": False, "similarity": None, "x": 1.5, "y": 2.0, "t": 1.0}]


def tiny_map() -> LatentMap:
    """Three molecules in a 3-D latent space; one without a logP."""
    z = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 2.0, 0.0]], np.float32)
    fitted = PCAProjection.fit(z)
    return LatentMap(["CCO", "c1ccccc1", "CC(=O)O"], z, fitted.transform(z),
                     {"logp": np.array([-0.5, 1.7, np.nan], np.float32),
                      "length": np.array([3, 8, 7], np.float32)}, fitted, "list")


def test_the_figure_draws_every_point_and_the_shown_sets():
    latent = tiny_map()
    drawn = figure.map_figure(latent, "logp", {})
    points = drawn["data"][0]
    assert points["type"] == "scattergl" and len(points["x"]) == 3
    assert points["marker"]["color"][:2] == pytest.approx([-0.5, 1.7])
    assert points["marker"]["color"][2] is None  # NaN is not JSON
    assert points["marker"]["colorbar"]["title"]["text"] == "logP"
    assert drawn["layout"]["uirevision"] == "map"  # zoom and pan survive updates
    assert [t["name"] for t in drawn["data"][1:]] == list(figure.OVERLAYS)
    assert not any(t["x"] or t["showlegend"] for t in drawn["data"][1:])  # nothing shown yet
    selection = {"x": 0.0, "y": 0.0, "smiles": "CCO", "neighbours": ROWS}
    drawn = figure.map_figure(latent, "length", {"selection": selection,
                                            "interpolation": {"path": ROWS}})
    shown = {t["name"]: t for t in drawn["data"][1:] if t["showlegend"]}
    assert list(shown) == ["neighbours", "selected", "interpolation"]
    assert shown["neighbours"]["customdata"] == ["CCO", "C1C"]
    assert shown["neighbours"]["marker"]["symbol"] == ["circle-open", "x"]  # invalid
    assert {t["type"] for t in drawn["data"]} == {"scattergl"}  # SVG would be drawn under the map
    assert shown["selected"]["x"] == [0.0] and shown["interpolation"]["mode"] == "lines+markers"


def test_a_predicted_colour_is_labelled_as_a_prediction():
    latent = tiny_map()
    latent.properties["predicted:qed"] = np.array([0.1, 0.5, 0.9], np.float32)
    points = figure.map_figure(latent, "predicted:qed", {})["data"][0]
    assert points["marker"]["color"] == pytest.approx([0.1, 0.5, 0.9])
    assert points["marker"]["colorbar"]["title"]["text"] == "qed (predicted)"


def test_points_of_the_map_and_of_overlays_name_their_molecule():
    latent = tiny_map()
    assert figure.point_molecule(latent, {"curveNumber": 0, "customdata": 1}) == ("c1ccccc1", 1)
    assert figure.point_molecule(latent, {"curveNumber": 2, "customdata": "CCN"}) == ("CCN", None)


