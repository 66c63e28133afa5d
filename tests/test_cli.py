"""CLI smoke tests in a temporary directory: train -> sample -> encode -> decode -> ..."""

import importlib.util
import json
import os
import re
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
    assert main(["sample", run_dir, "-n", "7", "--top-k", "2", "--temperature", "0.5"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 7


def test_sample_rejection_flag_and_its_one_line_errors(run_dir, capsys):
    assert main(["sample", run_dir, "-n", "30", "--seed", "2", "--rejection", "3"]) == 0
    drawn = capsys.readouterr().out.splitlines()
    from seqvae import inference
    from seqvae.run import load_run

    assert drawn == inference.sample(load_run(run_dir), 30, seed=2, rejection=3)
    assert main(["sample", run_dir, "-n", "3", "--rejection", "2", "--no-grammar"]) == 2
    assert "rejection sampling works under the grammar" in capsys.readouterr().err
    assert main(["sample", run_dir, "-n", "3", "--rejection", "-1"]) == 2
    assert "rejection rounds must be >= 0" in capsys.readouterr().err


def _parses(smiles: str) -> bool:
    """RDKit parses the line (checked here directly, not through seqvae.data.chemistry)."""
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    return bool(smiles) and Chem.MolFromSmiles(smiles) is not None  # "" parses to an empty Mol


def test_sample_valid_only_and_unique_filter_the_samples(run_dir, capsys):
    def sample(*flags):
        # Sampled, not greedy: greedy strings of this model all parse (long chains of N, O, S and
        # halogens); without the grammar mask, as the filters must work on any run.
        assert main(["sample", run_dir, "-n", "40", "--seed", "1", "--no-grammar", *flags]) == 0
        return capsys.readouterr().out.splitlines()

    raw = sample()
    assert len(raw) == 40
    # After 6 steps the model is barely trained: the unfiltered samples hold invalid lines,
    # repeated lines and a few valid ones, so each filter has something to remove and to keep.
    # (If training changes and this no longer holds, pick another -n/--seed.)
    assert any(not _parses(s) for s in raw), raw
    assert len(set(raw)) < len(raw), raw
    assert any(_parses(s) for s in raw), raw

    valid = sample("--valid-only")
    assert valid and all(_parses(s) for s in valid), valid
    assert valid == [s for s in raw if _parses(s)]  # same seed: filtered, not redrawn

    unique = sample("--unique")
    assert len(unique) == len(set(unique)), unique
    assert unique == list(dict.fromkeys(raw))  # first occurrences, in order

    both = sample("--valid-only", "--unique")
    assert both and all(_parses(s) for s in both) and len(both) == len(set(both)), both
    assert both == list(dict.fromkeys(valid))


@pytest.mark.slow
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
    captured = capsys.readouterr()
    rows = captured.out.splitlines()
    assert len(rows) == 4 and rows[0].startswith("0.000\t") and rows[-1].startswith("1.000\t")
    assert re.search(r"intermediates: \d/2 valid, \d distinct molecules; ends decoded back to "
                     r"themselves: \d/2", captured.err)
    assert main(["sample", run_dir, "-n", "5", "--no-grammar"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5
    assert main(["reconstruct", run_dir, str(data), "--samples", "0", "--beam", "3"]) == 0
    assert "beam 3 from mean z:  exact reconstruction" in capsys.readouterr().out
    assert main(["reconstruct", run_dir, str(data), "--samples", "0", "--limit", "2",
                 "--json"]) == 0  # 2 of the 3 lines, drawn at random
    assert json.loads(capsys.readouterr().out)["sequences"] == 2
    assert main(["decode", run_dir, str(z), "--beam", "3"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


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


def test_user_data_gets_no_demo_limits_and_the_limits_are_printed(tmp_path, capsys):
    data = tmp_path / "mine.smi"
    data.write_text("\n".join(SMILES) + "\n")
    code = main(["train", str(data), "--out", str(tmp_path / "r"), "--max-steps", "2",
                 "--set", "model.decoder_units=16", "--set", "model.encoder_units=16",
                 "--set", "train.export_at_end=false"])
    assert code == 0
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if line.startswith("seqvae: training on"))
    assert "data.limit" not in line and "no time budget" in line
    assert "stops after 3 validations without improvement" in line


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("moses") is None, reason="needs the molsets data")
def test_demo_trains_samples_and_reconstructs(tmp_path, capsys, monkeypatch):
    import seqvae.presets

    real = seqvae.presets.demo_config

    def tiny_demo():  # the demo's recipe and data, a tiny model and length
        return real().with_overrides(["model.encoder_units=16", "model.decoder_units=16",
                                      "model.latent_dim=4", "data.limit=300",
                                      "train.max_steps=4", "train.export_at_end=false"])

    monkeypatch.setattr(seqvae.presets, "demo_config", tiny_demo)
    monkeypatch.setattr("seqvae.workflows.DEMO_HEAD_MOLECULES", 200)
    monkeypatch.setattr("seqvae.workflows.DEMO_HEAD_TEST", 40)
    assert main(["demo", "--out", str(tmp_path / "demo"), "-n", "20",
                 "--temperatures", "1.0"]) == 0
    out, err = capsys.readouterr()
    # the property head seqvae optimize and the explorer read: fitted by the demo itself
    assert re.search(r"fitted a property head \(logp, qed, sa, plogp, mw\) on \d+ encodings in "
                     r"\d+s .*R² on 40 test molecules: logp -?\d", out)
    assert (tmp_path / "demo" / "property_head" / "head.json").exists()
    from seqvae.data.chemistry import canonical_smiles

    samples = (tmp_path / "demo" / "samples_t1.smi").read_text().splitlines()
    assert samples and all(canonical_smiles(s) in (s, None) for s in samples)  # canonical form
    # the start line says so (model.prior_encodings, at most the training set), and the end
    # of training does it
    assert re.search(r"then keeps the aggregate posterior of [\d,]+ training sequences as the "
                     r"prior \(widened 1\.45x\)", err)
    assert re.search(r"prior: the aggregate posterior of \d+ training sequences", err)
    assert re.search(r"sampled 20 molecules from the prior at temperature 1 \(z from the aggregate "
                     r"posterior of \d+ training encodings, each widened 1.45x\): valid \d+\.\d%.*"
                     r"by rejection under the grammar: \d+\.\d% of first draws rejected", out)
    assert re.search(r"reconstructed \d+\.\d% of 20 MOSES test molecules drawn at random exactly", out)
    assert (tmp_path / "demo" / "samples_t1.smi").exists()
    assert real().train.max_steps == 2000 and real().data.kekulize  # the demo's fixed length
    assert not real().train.grammar_softmax and real().model.rejection_rounds == 8  # its recipe
    assert real().model.grammar_features and real().model.prior_widen == 1.45


@pytest.mark.slow
def test_the_seeds_one_hot_data_trains_samples_encodes_and_decodes(tmp_path, capsys):
    """The question seqvae started from: one-hot data (batch, max_len 3, 4 classes) and a
    free-running GRU decoder, through the command line as a user types it; no tokenizer or
    grammar named (the array decides), under the default preset."""
    ids = np.random.default_rng(0).integers(0, 4, (256, 3))
    x = tmp_path / "x.npy"
    np.save(x, np.eye(4, dtype=np.float32)[ids])
    run = str(tmp_path / "run")
    assert main(["train", str(x), "--out", run, "--max-steps", "30",
                 "--set", "model.decoder_input=free_running", *TINY]) == 0
    err = capsys.readouterr().err
    assert "x.npy holds class ids: its classes are the tokens (data.tokenizer=word)" in err
    config = json.load(open(os.path.join(run, "config.json")))
    assert config["data"]["tokenizer"] == "word" and not config["model"]["grammar_features"]
    assert main(["sample", run, "-n", "5", "--out", str(tmp_path / "s.npy")]) == 0
    samples = np.load(tmp_path / "s.npy")
    assert samples.shape == (5, 3, 4) and set(np.unique(samples)) <= {0.0, 1.0}
    assert main(["encode", run, str(x), "--out", str(tmp_path / "z.npy")]) == 0
    assert np.load(tmp_path / "z.npy").shape == (256, 4)
    capsys.readouterr()
    assert main(["decode", run, str(tmp_path / "z.npy"), "--out", str(tmp_path / "back.npy")]) == 0
    back = np.load(tmp_path / "back.npy")
    assert back.shape == (256, 3, 4) and np.all(back.sum(-1) <= 1)


def test_text_that_is_not_smiles_gets_the_tokenizers_that_fit(tmp_path, capsys):
    proteins = tmp_path / "proteins.txt"
    proteins.write_text("MKTAYIAKQRQISFVK\nMVLSPADKTNVKAAW\n")
    assert main(["train", str(proteins), "--out", str(tmp_path / "run"), "--max-steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "none of the 2 lines is a valid SMILES" in err
    assert "train with data.tokenizer=char" in err
    selfies = tmp_path / "selfies.txt"
    selfies.write_text("[C][=C][C][=C][C][=C][Ring1][=Branch1]\n[C][=C]\n")
    assert main(["train", str(selfies), "--out", str(tmp_path / "run"), "--max-steps", "1"]) == 2
    assert "they are SELFIES: train with data.tokenizer=selfies" in capsys.readouterr().err
    # the demo preset's SMILES-only decoder input is off for another tokenizer, not an error
    assert main(["train", str(proteins), "--out", str(tmp_path / "chars"), "--preset", "demo",
                 "--max-steps", "1", "--set", "data.tokenizer=char", *TINY]) == 0


def test_molecules_come_out_canonical_unless_raw(tmp_path, capsys):
    from seqvae.data.chemistry import canonical_smiles

    data = tmp_path / "train.smi"
    data.write_text("\n".join(SMILES) + "\n")
    run = str(tmp_path / "kekule")
    assert main(["train", str(data), "--out", run, "--max-steps", "4",
                 "--set", "data.kekulize=true", *TINY]) == 0
    capsys.readouterr()
    assert main(["sample", run, "-n", "40", "--seed", "1", "--raw"]) == 0
    raw = capsys.readouterr().out.splitlines()
    assert main(["sample", run, "-n", "40", "--seed", "1"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert not any(c in "".join(raw) for c in "cno")  # the model writes Kekule SMILES
    assert shown == [canonical_smiles(text) or text for text in raw]


def test_finetune_reports_what_it_kept_trains_and_compares(run_dir, tmp_path, capsys):
    data = tmp_path / "mine.smi"
    data.write_text("\n".join(sorted(set(SMILES)) + ["CCO.Cl", "C[C@H](O)CC", "CCP"]) + "\n")
    out = str(tmp_path / "tuned")
    assert main(["finetune", run_dir, str(data), "--out", out, "--max-steps", "4",
                 "--min-steps", "4", "--batch-size", "8", "-n", "20", "--no-fcd",
                 "--set", "train.export_at_end=false"]) == 0
    captured = capsys.readouterr()
    assert "23 molecules read, 22 kept; 1 cut to their largest fragment" in captured.err
    assert "left out 1 with a token the run cannot write (first: line 23, token 'P'" in captured.err
    assert re.search(r"^  valid +[01]\.\d{3} +[01]\.\d{3}$", captured.out, re.M)
    assert "FCD to held-out" in captured.out and f"fine-tuned run: {out}" in captured.out
    assert main(["sample", out, "-n", "3"]) == 0
    assert len(capsys.readouterr().out.split()) == 3
    assert main(["finetune", run_dir, str(tmp_path / "none.smi"), "--out", str(tmp_path / "x")]) == 2
    assert "none.smi" in capsys.readouterr().err
