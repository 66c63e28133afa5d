"""seqvae.explore.app without a browser: exports, the map figure, the page's parts with and
without a property head, and the hint when Dash is missing."""

import sys
from types import SimpleNamespace

import numpy as np
import pytest

from seqvae.errors import SeqvaeError
from seqvae.explore import app
from seqvae.explore.latent_map import LatentMap
from seqvae.explore.projection import PCAProjection

ROWS = [{"smiles": "CCO", "valid": True, "similarity": 1.0, "x": 0.5, "y": -1.0, "t": 0.0},
        {"smiles": "C1C", "valid": False, "similarity": None, "x": 1.5, "y": 2.0, "t": 1.0}]


def _map():
    z = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 2.0, 0.0]], np.float32)
    fitted = PCAProjection.fit(z)
    return LatentMap(["CCO", "c1ccccc1", "CC(=O)O"], z, fitted.transform(z),
                     {"logp": np.array([-0.5, 1.7, np.nan], np.float32),
                      "length": np.array([3, 8, 7], np.float32)}, fitted, "list")


def test_exports_write_smi_and_csv():
    assert app.export_text(ROWS, app.EXPORTS["interpolation"], "smi") == "CCO\nC1C\n"
    assert app.export_text(ROWS, app.EXPORTS["interpolation"], "csv") == (
        "t,smiles,valid,similarity,x,y\n0.0,CCO,True,1.0,0.5,-1.0\n1.0,C1C,False,,1.5,2.0\n")


def test_the_figure_draws_every_point_and_the_shown_sets():
    latent = _map()
    figure = app._figure(latent, "logp", {})
    points = figure["data"][0]
    assert points["type"] == "scattergl" and len(points["x"]) == 3
    assert points["marker"]["color"][:2] == pytest.approx([-0.5, 1.7])
    assert points["marker"]["color"][2] is None  # NaN is not JSON
    assert figure["layout"]["uirevision"] == "map"  # zoom and pan survive updates
    assert [t["name"] for t in figure["data"][1:]] == list(app.OVERLAYS)
    assert not any(t["x"] or t["showlegend"] for t in figure["data"][1:])  # nothing shown yet
    selection = {"x": 0.0, "y": 0.0, "smiles": "CCO", "neighbours": ROWS}
    figure = app._figure(latent, "length", {"selection": selection,
                                            "interpolation": {"path": ROWS}})
    shown = {t["name"]: t for t in figure["data"][1:] if t["showlegend"]}
    assert list(shown) == ["neighbours", "selected", "interpolation"]
    assert shown["neighbours"]["customdata"] == ["CCO", "C1C"]
    assert shown["neighbours"]["marker"]["symbol"] == ["circle-open", "x-thin-open"]  # invalid
    assert shown["selected"]["x"] == [0.0] and shown["interpolation"]["mode"] == "lines+markers"


def test_points_of_the_map_and_of_overlays_name_their_molecule():
    latent = _map()
    assert app._point_molecule(latent, {"curveNumber": 0, "customdata": 1}) == ("c1ccccc1", 1)
    assert app._point_molecule(latent, {"curveNumber": 2, "customdata": "CCN"}) == ("CCN", None)


def _explorer(head=None):
    return SimpleNamespace(map=_map(), head=head, beam_width=5, latent_dim=3,
                           run=SimpleNamespace(run_dir="runs/x"))


def test_the_optimise_panel_appears_only_with_a_property_head():
    pytest.importorskip("dash", reason="the explore extra is not installed")
    plain = str(app.build_app(_explorer()).layout)
    assert "tab-optimise" not in plain and "predicted" not in plain
    head = SimpleNamespace(name="logP")
    page = str(app.build_app(_explorer(head)).layout)
    assert "tab-optimise" in page and "logP (predicted)" in page


def test_without_dash_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "dash", None)
    with pytest.raises(SeqvaeError, match=r"pip install 'seqvae\[explore\]'"):
        app.require_dash()
