"""CLI smoke tests in a temporary directory: train -> sample -> encode -> decode -> ..."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import SMILES

from seqvae.cli import main, parse_duration

TINY = ["--set", "model.encoder_units=16", "--set", "model.decoder_units=16",
        "--set", "model.decoder_layers=1", "--set", "model.latent_dim=4",
        "--set", "train.batch_size=8", "--set", "train.log_every=2",
        "--set", "train.export_at_end=false"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    data = folder / "train.smi"
    data.write_text("# a comment line\n" + "\n".join(SMILES) + "\n")
    out = str(folder / "run")
    assert main(["train", str(data), "--out", out, "--max-steps", "6", *TINY]) == 0
    return out


def test_train_summary_and_files(run_dir):
    for name in ("run.json", "config.json", "vocab.json", "metrics.jsonl"):
        assert os.path.exists(os.path.join(run_dir, name))
    config = json.load(open(os.path.join(run_dir, "config.json")))
    assert config["model"]["latent_dim"] == 4 and config["train"]["max_steps"] == 6


def test_sample_to_file_and_stdout(run_dir, tmp_path, capsys):
    out = tmp_path / "samples.smi"
    assert main(["sample", run_dir, "-n", "7", "--seed", "3", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 7
    assert main(["sample", run_dir, "-n", "7", "--seed", "3"]) == 0
    assert capsys.readouterr().out.splitlines() == lines  # same seed, same samples
    assert main(["sample", run_dir, "-n", "7", "--top-k", "2", "--temperature", "0.5",
                 "--unique"]) == 0
    assert main(["sample", run_dir, "-n", "5", "--greedy", "--valid-only"]) == 0


def test_encode_decode_reconstruct_interpolate(run_dir, tmp_path, capsys):
    data = tmp_path / "x.smi"
    data.write_text("CCO\nc1ccccc1\nCC(=O)O\n")
    z, log_var = tmp_path / "z.npy", tmp_path / "lv.npy"
    assert main(["encode", run_dir, str(data), "--out", str(z), "--log-var", str(log_var)]) == 0
    means = np.load(z)
    assert means.shape == (3, 4) and means.dtype == np.float32
    assert np.load(log_var).shape == (3, 4)
    capsys.readouterr()
    assert main(["decode", run_dir, str(z)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["reconstruct", run_dir, str(data), "--samples", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["sequences"] == 3 and 0 <= result["token_accuracy_mean_z"] <= 1
    assert main(["interpolate", run_dir, "CCO", "c1ccccc1", "--steps", "4", "--slerp"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 4 and rows[0].startswith("0.000\t") and rows[-1].startswith("1.000\t")


def test_doctor_on_a_run_dir_exits_zero(run_dir, capsys):
    assert main(["doctor", run_dir, "--only-config"]) == 0
    out = capsys.readouterr().out
    assert "3 of 3 checks passed" in out and "FAIL" not in out


def test_python_dash_m_and_help_examples():
    result = subprocess.run([sys.executable, "-m", "seqvae", "sample", "--help"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and "example:" in result.stdout
    for command in ("train", "encode", "decode", "reconstruct", "interpolate", "doctor", "demo"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0


def test_parse_duration():
    assert parse_duration("15m") == 900 and parse_duration("90") == 90 and parse_duration("1.5h") == 5400


def test_resume_continues_to_max_steps(run_dir, tmp_path, capsys):
    import shutil

    copy = str(tmp_path / "copy")
    shutil.copytree(run_dir, copy)
    assert main(["train", "--out", copy, "--resume", "--max-steps", "8"]) == 0
    assert "trained 8 steps" in capsys.readouterr().out
