"""The property commands end to end: train --properties, fit-properties, predict, optimize."""

import csv
import io
import os
import subprocess
import sys

import pytest
from conftest import HELD_OUT, SMILES

from seqvae.cli import main

TINY = ["--set", "model.encoder_units=16", "--set", "model.decoder_units=16",
        "--set", "model.decoder_layers=1", "--set", "model.latent_dim=4",
        "--set", "train.batch_size=8", "--set", "train.export_at_end=false"]


@pytest.fixture(scope="module")
def csv_run(tmp_path_factory):
    """A tiny run trained jointly on logP and a CSV column."""
    folder = tmp_path_factory.mktemp("props")
    data = folder / "assay.csv"
    data.write_text("SMILES,pIC50\n" + "".join(f"{s},{i % 7 + 0.5}\n" for i, s in enumerate(SMILES)))
    out = str(folder / "run")
    assert main(["train", str(data), "--out", out, "--max-steps", "4",
                 "--properties", "logp,col:pIC50", *TINY]) == 0
    return out, data


def test_fit_predict_and_optimize(csv_run, tmp_path, capsys):
    run_dir, data = csv_run
    assert main(["fit-properties", run_dir, "--data", str(data), "--properties", "logp,qed,col:pIC50",
                 "--test", str(data), "--epochs", "2", "--limit", "0", "--depth", "2",
                 "--width", "16", "--schedule", "constant", "--activation", "tanh"]) == 0
    out = capsys.readouterr().out
    assert "property head fitted on 40 encodings" in out and "pIC50" in out and "R2" in out
    import json

    saved = json.load(open(os.path.join(run_dir, "property_head", "head.json")))
    assert (saved["depth"], saved["width"]) == (2, 16)  # the run's config says 3 x 67
    assert saved["schedule"] == "constant" and saved["learning_rate"] == 1e-3
    assert saved["activation"] == "tanh"
    molecules = tmp_path / "m.smi"
    molecules.write_text("\n".join(HELD_OUT[:3]) + "\n")
    assert main(["predict", run_dir, str(molecules)]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0] == ["smiles", "logp", "qed", "col:pIC50"] and len(rows) == 4
    results = tmp_path / "results.csv"
    assert main(["optimize", run_dir, "--objective", "qed", "--start", str(molecules),
                 "--steps", "2", "--restarts", "1", "--samples", "1", "--rounds", "2",
                 "--elites", "2", "--out", str(results),
                 "--trajectory", str(tmp_path / "path.csv")]) == 0
    rows = list(csv.DictReader(open(results)))
    assert len(rows) == 3 and set(rows[0]) >= {"start", "smiles", "start_value", "value", "similarity"}
    assert all(float(r["similarity"]) >= 0.4 for r in rows if r["smiles"])
    # 3 starts x (1 path, then 1 from each of 2 elites) x 3 points x (greedy + 1 sample), free
    # and with 70% of the start kept (--keep's default)
    path = list(csv.DictReader(open(tmp_path / "path.csv")))
    assert len(path) == 3 * 3 * 3 * 2 * 2 and {r["round"] for r in path} == {"0", "1"}
    assert {r["decoding"] for r in path} == {"greedy", "sample1", "keep0.7_greedy",
                                             "keep0.7_sample1"}
    capsys.readouterr()
    assert main(["optimize", run_dir, "--objective", "logp", "--start", HELD_OUT[0], "--steps", "2",
                 "--restarts", "2", "--samples", "0", "--rounds", "1", "--out", str(results)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("1 starts:") and out[1].startswith(f"start {HELD_OUT[0]} (")
    assert out[3].split()[:3] == ["round", "restart", "step"] and len(out) == 4 + 2 * 3  # the path


@pytest.mark.parametrize("argv, message", [
    (["optimize", "{run}", "--objective", "col:pIC50", "--start", "CCO", "--out", "{tmp}/x.csv"],
     "'col:pIC50' is not a property RDKit computes"),
    (["optimize", "{run}", "--objective", "qed", "--similarity", "2", "--out", "{tmp}/x.csv"],
     "similarity must be in [0, 1]"),
    (["fit-properties", "{run}", "--data", "{data}", "--properties", "col:Ki"], "no column 'Ki'"),
    (["fit-properties", "{run}", "--properties", "logp,bogus"], "unknown property 'bogus'"),
    (["fit-properties", "{run}", "--width", "0"], "the head needs depth >= 0, width >= 1"),
    (["fit-properties", "{run}", "--schedule", "step"], "schedule cosine or constant and"),
    (["fit-properties", "{run}", "--activation", "elu"], "activation tanh or silu or gelu or relu"),
])
def test_bad_property_input_is_one_line(csv_run, tmp_path, capsys, argv, message):
    run_dir, data = csv_run
    assert main([a.format(run=run_dir, data=data, tmp=tmp_path) for a in argv]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if not line.startswith("seqvae fit-properties: ")]  # progress lines
    assert len(err) == 1 and err[0].startswith("seqvae: error: ") and message in err[0], err


def test_train_with_a_non_numeric_column_is_one_line(tmp_path, capsys):
    data = tmp_path / "bad.csv"
    data.write_text("SMILES,pIC50\n" + "".join(f"{s},1.0\n" for s in SMILES[:5]) + "CCO,high\n")
    assert main(["train", str(data), "--out", str(tmp_path / "r"), "--max-steps", "1",
                 "--properties", "col:pIC50", *TINY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "seqvae: error: " + f"{data}:7: column 'pIC50' holds 'high', not a number"


def test_optimize_cli_defaults_are_the_library_defaults():
    """`seqvae optimize` spells its search defaults out (the parser must not import TensorFlow);
    they are OptimizeSettings's, so the CLI and the Python API search alike."""
    from seqvae.cli import build_parser
    from seqvae.optimize import OptimizeSettings

    args = build_parser().parse_args(["optimize", "RUN", "--objective", "qed", "--out", "x.csv"])
    defaults = OptimizeSettings()
    for name in ("similarity", "steps", "restarts", "step_size", "trust_radius", "samples",
                 "temperature", "beam", "rounds", "elites", "keep", "seed"):
        assert getattr(args, name) == getattr(defaults, name), name


def test_building_the_parser_does_not_load_tensorflow():
    """`seqvae --help` and argument errors stay instant: no command's parser imports TF."""
    code = ("import sys; from seqvae.cli import build_parser; build_parser(); "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                   cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
