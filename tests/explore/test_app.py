"""seqvae.explore.app (and the page of seqvae.explore.layout) without a browser: exports, the
page's parts with and without a property head, and the hint when Dash is missing."""

import sys
from types import SimpleNamespace

import pytest

from seqvae.errors import SeqvaeError
from seqvae.explore import app
from test_figure import ROWS, tiny_map


def test_exports_write_smi_and_csv():
    assert app.export_text(ROWS, app.EXPORTS["interpolation"], "smi") == "CCO\nC1C\n"
    assert app.export_text(ROWS, app.EXPORTS["interpolation"], "csv") == (
        "t,smiles,valid,similarity,x,y\n0.0,CCO,True,1.0,0.5,-1.0\n1.0,C1C,False,,1.5,2.0\n")


def _explorer(head=None):
    return SimpleNamespace(map=tiny_map(), head=head, beam_width=5, latent_dim=3,
                           run=SimpleNamespace(run_dir="runs/x"))


def test_the_optimise_panel_appears_only_with_a_property_head():
    pytest.importorskip("dash", reason="the explore extra is not installed")
    plain = str(app.build_app(_explorer()).layout)
    assert "tab-optimise" not in plain and "predicted" not in plain
    head = SimpleNamespace(names=("logp", "col:pIC50"))
    page = str(app.build_app(_explorer(head)).layout)
    assert "tab-optimise" in page and "logp (predicted)" in page and "col:pIC50 (predicted)" in page


def test_the_sample_panel_has_a_condition_box_and_a_scaffold_box():
    pytest.importorskip("dash", reason="the explore extra is not installed")
    from seqvae.explore import layout

    page = str(app.build_app(_explorer()).layout)
    assert "sample-where" in page and "sample-scaffold" in page
    assert layout.values_note({"logp": 2.71234, "qed": 0.78}) == "logp 2.71 · qed 0.78"
    assert layout.values_note(None) == ""


def test_without_dash_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "dash", None)
    with pytest.raises(SeqvaeError, match=r"pip install 'seqvae\[explore\]'"):
        app.require_dash()
