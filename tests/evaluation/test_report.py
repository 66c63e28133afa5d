"""Tests for seqvae.report: plots are valid PNGs, files hold what they should, tables read well."""

import json
import math
import os
import struct
import sys

import numpy as np
import pytest

from seqvae import inference
from seqvae.data import chemistry
from seqvae.errors import SeqvaeError
from seqvae.evaluation import chemnet, plots, report
from seqvae.files import read_jsonl

TEST = ["CCCO", "CCN", "c1ccccc1C", "CC(=O)N", "OCCO", "CCCl"]
SAMPLES = ["CCO", "", "C1CC", "c1ccccc1", "CCO"]  # an empty decoding and an invalid one included


def assert_png(path: str) -> None:
    """A PNG file: the signature, then an IHDR chunk with a positive width and height."""
    with open(path, "rb") as handle:
        head = handle.read(24)
    assert os.path.getsize(path) > 0
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", path
    width, height = struct.unpack(">II", head[16:24])
    assert width > 100 and height > 100, (width, height)


def results_for(run) -> dict:
    """What evaluate returns, written by hand (a NaN and a None included)."""
    latent_dim = run.config.model.latent_dim
    return {
        "run_dir": run.run_dir, "n_samples": len(SAMPLES), "seed": 0, "tokenizer": "smiles",
        "data_source": "list",
        "generation": {"valid": 0.6, "unique@5": 2 / 3, "FCD/Test": None, "Scaf/Test": math.nan},
        "vae_quality": {"sequences": len(TEST), "elbo": -20.5, "nll_iw": 20.1, "active_units": 3,
                        "kl_per_dimension": [0.5] * latent_dim,
                        "posterior_mean_variance": [0.5, 0.001] + [0.2] * (latent_dim - 2)},
        "reconstruction": None,
        "references": {"test": "list (6 sequences)", "test_scaffolds": None, "train": None},
        "wall_seconds": {"sampling": 1.25, "total": 3.5},
        "notes": ["Novelty not computed: no train set given"],
    }


# --- plots ---------------------------------------------------------------------------------------


def test_pca_2d_finds_the_direction_of_spread():
    points = np.array([[0.0, 0.0, 1.0], [2.0, 0.0, 1.0], [4.0, 0.0, 1.0]])  # spread along x only
    projected, explained = plots.pca_2d(points)
    assert projected.shape == (3, 2)
    np.testing.assert_allclose(np.abs(projected[:, 0]), [2.0, 0.0, 2.0], atol=1e-12)
    np.testing.assert_allclose(projected[:, 1], 0.0, atol=1e-12)
    np.testing.assert_allclose(explained, [1.0, 0.0], atol=1e-12)
    one_dim, explained = plots.pca_2d(np.array([[1.0], [3.0]]))
    assert one_dim.shape == (2, 2) and explained[1] == 0.0


def test_plot_training_curves_from_the_run_log(run, tmp_path):
    records = read_jsonl(os.path.join(run.run_dir, "metrics.jsonl"))
    assert {r["kind"] for r in records} == {"step", "epoch", "end"}  # "end": why it stopped
    plots.plot_training_curves(records, str(tmp_path / "curves.png"))
    assert_png(str(tmp_path / "curves.png"))
    with pytest.raises(SeqvaeError, match="no training steps"):
        plots.plot_training_curves([], str(tmp_path / "none.png"))


def test_plot_kl_per_dimension(tmp_path):
    plots.plot_kl_per_dimension([0.1, 2.0, 0.0], str(tmp_path / "kl.png"), [True, True, False])
    plots.plot_kl_per_dimension([0.1, 2.0, 0.0], str(tmp_path / "plain.png"))
    assert_png(str(tmp_path / "kl.png"))
    assert_png(str(tmp_path / "plain.png"))


def test_plot_latent_map_of_test_encodings(run, tmp_path):
    means, _ = inference.encode(run, TEST + ["C1CC"])  # the invalid one is not encoded
    assert means.shape == (len(TEST), run.config.model.latent_dim)
    logp = plots.molecule_logp(TEST[:-1] + ["not a molecule"])
    assert np.isnan(logp[-1]) and logp[0] == pytest.approx(chemistry.logp("CCCO"))
    plots.plot_latent_map(means, str(tmp_path / "map.png"), colour=logp)
    assert_png(str(tmp_path / "map.png"))


def test_molecule_properties_of_valid_molecules_only():
    properties = plots.molecule_properties(["CCO", "C1CC", "", "CC(=O)O"])
    assert set(properties) == {"logP", "QED", "molecular weight", "length"}
    weights = [chemistry.molecular_weight("CCO"), chemistry.molecular_weight("CC(=O)O")]
    np.testing.assert_allclose(properties["molecular weight"], weights)
    np.testing.assert_array_equal(properties["length"], [3, 7])  # C C O; C C ( = O ) O
    assert plots.molecule_properties([])["logP"].shape == (0,)


def test_plot_property_histograms(tmp_path):
    plots.plot_property_histograms(SAMPLES, TEST, str(tmp_path / "molecules.png"))
    plots.plot_property_histograms(["MKV", "MK"], ["MKVL"], str(tmp_path / "text.png"),
                                    molecules=False)
    assert_png(str(tmp_path / "molecules.png"))
    assert_png(str(tmp_path / "text.png"))


# --- the report ----------------------------------------------------------------------------------


def test_write_report_files(run):
    results = results_for(run)
    means, _ = inference.encode(run, TEST)
    folder = report.write_report(run.run_dir, results, SAMPLES, TEST, test_means=means)
    assert folder == os.path.join(run.run_dir, "report")
    with open(os.path.join(folder, "samples.smi")) as handle:
        assert handle.read() == "".join(f"{s}\n" for s in SAMPLES)  # 5 lines, empty one kept
    with open(os.path.join(folder, "metrics.json")) as handle:
        stored = json.load(handle, parse_constant=lambda c: pytest.fail(f"{c} in metrics.json"))
    assert stored["generation"]["Scaf/Test"] is None and stored["generation"]["valid"] == 0.6
    for name in ("training_curves", "kl_per_dimension", "latent_map", "property_histograms"):
        assert_png(os.path.join(folder, f"{name}.png"))
    with open(os.path.join(folder, "report.md")) as handle:
        markdown = handle.read()
    for fragment in ("| n_samples | 5 |", "| valid | 0.6 |", "| FCD/Test | n/a |",
                     "| Scaf/Test | nan |", "| sampling | 1.25 |", "- Novelty not computed",
                     "![Training curves](training_curves.png)"):
        assert fragment in markdown, fragment
    assert "kl_per_dimension |" not in markdown  # lists go to the plot, not the table
    assert results["notes"] == ["Novelty not computed: no train set given"]  # every plot drawn


def test_write_report_never_runs_the_model(run, monkeypatch):
    """The report writes what it is given: without encodings it notes the missing latent map
    instead of loading and running the model."""
    import seqvae.run as rundir

    monkeypatch.setattr(rundir, "load_run", lambda *a: pytest.fail("the report loaded the run"))
    monkeypatch.setattr(inference, "encode", lambda *a, **k: pytest.fail("the report encoded"))
    results = results_for(run)
    results["vae_quality"] = None
    folder = report.write_report(run.run_dir, results, SAMPLES, TEST)
    assert not os.path.exists(os.path.join(folder, "latent_map.png"))
    assert any(note.startswith("latent_map.png not drawn: no encodings") for note in results["notes"])


def test_write_report_without_matplotlib_notes_it(run, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(chemnet.MissingExtraError, match="pip install matplotlib"):
        plots.plot_kl_per_dimension([1.0], str(tmp_path / "kl.png"))
    run_dir = tmp_path / "copy"
    (run_dir / "report").mkdir(parents=True)
    (run_dir / "report" / "latent_map.png").write_bytes(b"from an earlier report")
    results = results_for(run)
    folder = report.write_report(str(run_dir), results, SAMPLES, TEST,
                                 test_means=np.zeros((len(TEST), 4)))
    assert sorted(os.listdir(folder)) == ["metrics.json", "report.md", "samples.smi"]  # stale gone
    plot_notes = [n for n in results["notes"] if n.startswith("plots not drawn")]
    assert len(plot_notes) == 1 and "pip install matplotlib" in plot_notes[0]
    with open(os.path.join(folder, "report.md")) as handle:
        assert "pip install matplotlib" in handle.read()


def test_format_table(run):
    results = {**results_for(run), "report_dir": "runs/x/report"}
    table = report.format_table(results)
    assert "Generated samples (MOSES metrics)" in table
    assert "Reconstruction (Kusner et al. 2017) and interpolation\n  not computed  see notes" in table
    lines = table.splitlines()
    assert "  valid      0.6" in lines and "  FCD/Test   n/a" in lines
    assert "note: Novelty not computed: no train set given" in lines
    assert lines[-1] == "report: runs/x/report"
