"""Bad input gets exit status 2 and one line ``seqvae: error: ...`` on stderr, never a traceback.

The command line runs in-process (``seqvae.cli.main``); one tiny run is trained per module and
shared by the sample/encode/decode cases.
"""

import contextlib
import gzip
import io
import json
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import copy_run
from hypothesis import given, settings
from hypothesis import strategies as st

from seqvae.cli import main
from seqvae.run import RunLock

SMILES = ["CCO", "c1ccccc1", "CC(=O)O", "CCN(CC)CC", "c1ccncc1", "CC(C)Cl", "OCC(O)CO", "CCBr",
          "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "O=C=O", "CC(=O)Nc1ccc(O)cc1", "CCOC(=O)C",
          "c1cc[nH]c1", "FC(F)(F)c1ccccc1", "CCCCCC", "NCC(=O)O", "CSC", "C=CC=C",
          "CC(C)O", "CCCl", "c1ccc(O)cc1", "CC(N)C(=O)O", "COC", "C1CCOC1", "CCS", "OC(=O)CCC(=O)O",
          "c1ccc(N)cc1", "CC=O", "CCCCO", "C1CC1", "CN(C)C", "c1ccoc1", "CC(C)(C)O", "ClCCl",
          "c1ccc(C)cc1", "OCCO", "CCOCC", "NC(=O)N"]
TINY = ["model.encoder_units=8", "model.decoder_units=8", "model.decoder_layers=1",
        "model.latent_dim=4", "train.batch_size=4"]


def tiny_args() -> list[str]:
    args = ["--max-steps", "1"]
    for item in TINY:
        args += ["--set", item]
    return args


def cli(argv) -> tuple[int, str, str]:
    """Runs the command line in-process; any exception escaping ``main`` fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def user_error(argv, *fragments) -> str:
    """Asserts status 2, one stderr line ``seqvae: error: ...`` holding ``fragments``."""
    code, _, err = cli(argv)
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("seqvae: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def write_smi(path, lines) -> str:
    path.write_text("".join(f"{line}\n" for line in lines))
    return str(path)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    data = write_smi(folder / "train.smi", SMILES)
    code, out, err = cli(["train", data, "--out", folder / "run", *tiny_args()])
    assert code == 0, err
    assert "trained 1 steps" in out
    return folder / "run"


# --- train -------------------------------------------------------------------------------------


def test_train_missing_file(tmp_path):
    user_error(["train", tmp_path / "missing.smi", "--out", tmp_path / "run", *tiny_args()],
               "missing.smi: no such file")


@pytest.mark.parametrize("name, content, fragment", [
    ("empty.smi", b"", "the file is empty"),
    ("garbage.smi", bytes(range(256)) * 8, "binary file"),
    ("latin1.smi", b"CCO\nCCN\nC\xe9C\n", "latin1.smi:3: not UTF-8"),
])
def test_train_unreadable_file(tmp_path, name, content, fragment):
    (tmp_path / name).write_bytes(content)
    user_error(["train", tmp_path / name, "--out", tmp_path / "run", *tiny_args()], fragment)


INVALID = SMILES[:10] + ["C1CC", "CCO", "not_a_smiles"] + SMILES[10:]  # lines 11 and 13


def test_train_invalid_smiles_strict(tmp_path):
    data = write_smi(tmp_path / "bad.smi", INVALID)
    user_error(["train", data, "--out", tmp_path / "run", "--strict", *tiny_args()],
               "bad.smi:11: invalid SMILES 'C1CC'", "2 invalid lines in all: 11, 13")


def test_train_invalid_smiles_skipped_without_strict(tmp_path):
    data = write_smi(tmp_path / "bad.smi", INVALID)
    code, out, err = cli(["train", data, "--out", tmp_path / "run", *tiny_args()])
    assert code == 0, err
    assert "Traceback" not in err
    assert "skipped 2 invalid SMILES" in err and "lines 11, 13" in err
    assert "trained 1 steps" in out
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["train_size"] + info["validation_size"] == len(INVALID) - 2


def test_train_all_invalid(tmp_path):
    data = write_smi(tmp_path / "bad.smi", ["C1CC", "xyz", "(((("])
    user_error(["train", data, "--out", tmp_path / "run", *tiny_args()], "none of the 3 lines")


def test_train_npy_of_wrong_shape(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((4, 3, 2, 2), np.float32))
    user_error(["train", tmp_path / "x.npy", "--out", tmp_path / "run", *tiny_args()],
               "x.npy: expected shape (N, T, C) one-hot")


def test_train_unknown_set_key(tmp_path):
    data = write_smi(tmp_path / "a.smi", SMILES)
    user_error(["train", data, "--out", tmp_path / "run", "--set", "model.latent=3"],
               "unknown key 'latent' in section 'model'")
    user_error(["train", data, "--out", tmp_path / "run", "--set", "optim.lr=3"], "unknown section")
    user_error(["train", data, "--out", tmp_path / "run", "--set", "latent_dim"],
               "expected section.key=value")


def test_train_wrong_value_type(tmp_path):
    data = write_smi(tmp_path / "a.smi", SMILES)
    user_error(["train", data, "--out", tmp_path / "run", "--set", "model.latent_dim=abc"],
               "model.latent_dim", "expected int")
    user_error(["train", data, "--out", tmp_path / "run", "--set", "model.decoder_input=x"],
               "model.decoder_input must be one of")


@pytest.mark.parametrize("item, fragment", [
    ("train.log_every=0", "train.log_every must be at least 1"),
    ("train.checkpoint_every=0", "train.checkpoint_every must be at least 1"),
    ("train.keep_checkpoints=0", "train.keep_checkpoints must be at least 1"),
    ("train.kl_cycles=0", "train.kl_cycles must be at least 1"),
    ("train.learning_rate=nan", "expected a finite number"),
])
def test_train_values_that_would_break_the_loop(tmp_path, item, fragment):
    data = write_smi(tmp_path / "a.smi", SMILES)
    user_error(["train", data, "--out", tmp_path / "run", *tiny_args(), "--set", item], fragment)


@pytest.mark.parametrize("name, text, fragment", [
    ("c.toml", "[model]\nlatent = 3\n", "unknown key 'model.latent'"),
    ("c.json", '{"model": {"latent_dim": "3"}}', "must be of type int"),
    ("c.toml", "[model\n", "not valid TOML"),
])
def test_train_bad_config_file(tmp_path, name, text, fragment):
    data = write_smi(tmp_path / "a.smi", SMILES)
    (tmp_path / name).write_text(text)
    user_error(["train", data, "--out", tmp_path / "run", "--config", tmp_path / name], name, fragment)


def test_train_missing_config_file(tmp_path):
    data = write_smi(tmp_path / "a.smi", SMILES)
    user_error(["train", data, "--out", tmp_path / "run", "--config", tmp_path / "nope.toml"],
               "nope.toml: cannot read config file")


def test_train_into_existing_run(tmp_path, run_dir):
    data = write_smi(tmp_path / "a.smi", SMILES)
    user_error(["train", data, "--out", run_dir, *tiny_args()], "already holds a run", "--resume")


def test_the_launch_command_with_resume_starts_finishes_and_refuses_other_settings(tmp_path):
    """One command for every start of a preemptible job: it starts the run, then leaves the
    finished run as it is; other settings are refused in one line."""
    data = write_smi(tmp_path / "a.smi", SMILES)
    command = ["train", data, "--out", tmp_path / "run", *tiny_args(), "--resume"]
    code, out, err = cli(command)
    assert code == 0, err
    assert "nothing to resume in" in err and "starting the run" in err
    first = out.splitlines()[-1]
    files = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    code, out, err = cli(command)
    assert code == 0, err
    assert "already finished at step 1 (max_steps); nothing to train" in err
    assert out.splitlines()[-1] == first  # the same weights checksum
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == files
    user_error(command + ["--set", "model.latent_dim=5"], "settings differ",
               "model.latent_dim: stored 4, given 5")


def test_second_training_process_on_the_same_run_dir(tmp_path):
    data = write_smi(tmp_path / "a.smi", SMILES)
    out = tmp_path / "run"
    out.mkdir()
    with RunLock(str(out)):
        user_error(["train", data, "--out", out, *tiny_args()], "another seqvae process")
    assert not (out / "run.json").exists()


def test_resume_while_locked(run_dir):
    with RunLock(str(run_dir)):
        user_error(["train", "--out", run_dir, "--resume", "--max-steps", "2"],
                   "another seqvae process")


# --- sample / encode / decode on bad run directories -------------------------------------------


def commands(run, tmp_path):
    z = tmp_path / "z.npy"
    np.save(z, np.zeros((2, 4), np.float32))
    data = write_smi(tmp_path / "q.smi", ["CCO"])
    return [["sample", run, "-n", "2"],
            ["encode", run, data, "--out", tmp_path / "out.npy"],
            ["decode", run, z]]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_missing_run_dir(tmp_path, index):
    user_error(commands(tmp_path / "nope", tmp_path)[index], "nope: no such run directory")


@pytest.mark.parametrize("index", [0, 1, 2])
def test_foreign_dir(tmp_path, index):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("hello")
    user_error(commands(foreign, tmp_path)[index], "not a seqvae run directory (no run.json)")


def corrupted_copy(run_dir, tmp_path, name, content):
    copy = tmp_path / "copy"
    copy_run(run_dir, copy)
    if content is None:
        shutil.rmtree(copy / name)
    elif callable(content):  # edits the JSON object in the file
        (copy / name).write_text(json.dumps(content(json.loads((copy / name).read_text()))))
    else:
        (copy / name).write_text(content)
    return copy


@pytest.mark.parametrize("name, content, fragment", [
    ("run.json", '{"format": "seqvae-run-1", "max_', "corrupted (not valid JSON)"),
    ("run.json", "", "corrupted (not valid JSON)"),
    ("run.json", '{"format": "seqvae-run-1"}', "corrupted (missing 'max_len')"),
    ("run.json", '{"format": "other"}', "not a seqvae run"),
    ("run.json", "[1, 2]", "not a seqvae run"),
    ("run.json", lambda info: {**info, "max_len": "x"}, "'max_len' must be a positive integer"),
    ("run.json", lambda info: {**info, "vocab_size": 3}, "vocab.json has"),
    ("run.json", lambda info: {**info, "tokenizer": "xx"}, "unknown tokenizer 'xx'"),
    ("config.json", "{", "config.json: not valid JSON"),
    ("vocab.json", "{}", "vocab.json"),
    ("checkpoints", None, "holds no checkpoint yet"),
])
@pytest.mark.parametrize("index", [0, 1, 2])
def test_corrupted_run_dir(run_dir, tmp_path, name, content, fragment, index):
    copy = corrupted_copy(run_dir, tmp_path, name, content)
    user_error(commands(copy, tmp_path)[index], fragment)


# --- encode / decode with bad data for a good run ----------------------------------------------


def test_sample_and_encode_work(run_dir, tmp_path):
    code, out, err = cli(["sample", run_dir, "-n", "3", "--seed", "1"])
    assert code == 0, err
    assert len(out.splitlines()) == 3, out
    data = write_smi(tmp_path / "q.smi", ["CCO", "c1ccccc1"])
    code, _, err = cli(["encode", run_dir, data, "--out", tmp_path / "z.npy"])
    assert code == 0, err
    assert np.load(tmp_path / "z.npy").shape == (2, 4)


def test_same_seed_same_samples(run_dir):
    # Fails if load_run leaves any weight at its random initial value (each load would differ).
    first = cli(["sample", run_dir, "-n", "4", "--seed", "3"])
    assert first[0] == 0, first[2]
    assert cli(["sample", run_dir, "-n", "4", "--seed", "3"]) == first


def test_sampling_controls(run_dir):
    greedy = cli(["sample", run_dir, "-n", "3", "--greedy"])
    assert greedy[0] == 0, greedy[2]
    assert cli(["sample", run_dir, "-n", "3", "--temperature", "0"]) == greedy  # 0 = greedy
    code, out, err = cli(["sample", run_dir, "-n", "3", "--top-k", "1000"])  # > vocabulary size
    assert code == 0 and len(out.splitlines()) == 3, err


@pytest.mark.parametrize("flags", [["--top-k", "-3"], ["--temperature", "-1"]])
def test_sample_bad_controls_one_line(run_dir, flags):
    user_error(["sample", run_dir, "-n", "2", *flags], "must be >= 0")


def test_sample_negative_count(run_dir):
    user_error(["sample", run_dir, "-n", "-1"], "-n")


def test_encode_gives_nan_rows_for_what_it_cannot_encode_and_strict_refuses(run_dir, tmp_path):
    # rows stay aligned with the input: a token not in the vocabulary, a too-long line and an
    # invalid SMILES each get a NaN row, counted by kind, the first named by its line
    max_len = json.loads((run_dir / "run.json").read_text())["max_len"]
    texts = ["CCO", "C[Se]C", "c1ccccc1", "C" * (max_len + 5), "C1CC", "CCN"]
    data = write_smi(tmp_path / "q.smi", texts)
    code, _, err = cli(["encode", run_dir, data, "--out", tmp_path / "z.npy"])
    assert code == 0, err
    z = np.load(tmp_path / "z.npy")
    assert z.shape == (6, 4)
    assert np.isnan(z).all(axis=1).tolist() == [False, True, False, True, True, False]
    summary = next(line for line in err.splitlines() if "could not be encoded" in line)
    assert "3 of 6 sequences" in summary and "1 invalid SMILES" in summary
    assert "1 longer than max_len" in summary and "1 with a token not in the vocabulary" in summary
    assert "q.smi:2: token '[Se]' is not in the run's vocabulary" in summary
    good = write_smi(tmp_path / "good.smi", ["CCO", "c1ccccc1", "CCN"])
    assert cli(["encode", run_dir, good, "--out", tmp_path / "z_good.npy"])[0] == 0
    np.testing.assert_array_equal(np.load(tmp_path / "z_good.npy"), z[[0, 2, 5]])
    user_error(["encode", run_dir, data, "--out", tmp_path / "z.npy", "--strict"],
               "q.smi:2: token '[Se]' is not in the run's vocabulary")
    long_only = write_smi(tmp_path / "long.smi", ["CCO", "C" * (max_len + 5)])
    user_error(["encode", run_dir, long_only, "--out", tmp_path / "z.npy", "--strict"],
               "long.smi:2:", f"longer than the model's maximum of {max_len}")


def test_encode_missing_and_empty_data(run_dir, tmp_path):
    user_error(["encode", run_dir, tmp_path / "nope.smi", "--out", tmp_path / "z.npy"], "no such file")
    (tmp_path / "empty.smi").write_text("")
    user_error(["encode", run_dir, tmp_path / "empty.smi", "--out", tmp_path / "z.npy"], "empty")
    cut = tmp_path / "cut.smi.gz"  # a copy that died halfway: the streaming count read it first
    cut.write_bytes(gzip.compress(b"CCO\n" * 2000)[:40])
    user_error(["encode", run_dir, cut, "--out", tmp_path / "z.npy"], "cut.smi.gz: cannot read")


@pytest.mark.slow
def test_sigterm_during_encode_leaves_no_file_and_says_so(run_dir, tmp_path):
    """A job manager's SIGTERM unwinds like Ctrl-C: the half-written .npy is removed, one line,
    status 143."""
    data = write_smi(tmp_path / "many.smi", SMILES * 10000)
    out = tmp_path / "out"
    out.mkdir()
    process = subprocess.Popen([sys.executable, "-m", "seqvae", "encode", str(run_dir), data,
                                "--out", str(out / "z.npy"), "--log-var", str(out / "v.npy")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not list(out.glob(".tmp-*")) and process.poll() is None:  # writing has begun
        assert time.monotonic() < deadline, "encode never started writing"
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 143, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "seqvae: terminated", err
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("z, fragment", [
    (np.zeros((3, 7), np.float32), "(N, 4)"),
    (np.zeros(4, np.float32), "(N, 4)"),
    (np.zeros((2, 4), np.int64), "(N, 4)"),
    (np.zeros((2, 2, 4), np.float32), "(N, 4)"),
])
def test_decode_npy_of_wrong_shape(run_dir, tmp_path, z, fragment):
    np.save(tmp_path / "z.npy", z)
    user_error(["decode", run_dir, tmp_path / "z.npy"], "z", fragment)


def test_decode_unreadable_npy(run_dir, tmp_path):
    user_error(["decode", run_dir, tmp_path / "nope.npy"], "nope.npy: no such file")
    (tmp_path / "z.npy").write_text("not an array")
    user_error(["decode", run_dir, tmp_path / "z.npy"], "not a readable .npy array")


def test_decode_good_npy(run_dir, tmp_path):
    np.save(tmp_path / "z.npy", np.zeros((2, 4), np.float32))
    code, out, err = cli(["decode", run_dir, tmp_path / "z.npy"])
    assert code == 0, err
    assert len(out.splitlines()) == 2


# --- random bytes never crash train ------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(content=st.one_of(
    st.binary(min_size=0, max_size=300),
    # Text that is often valid SMILES (and a CSV header), so some examples get as far as training.
    st.text(alphabet="CNOc1()=#[]+-H\n,\t S", max_size=80).map(lambda t: ("SMILES\n" + t).encode()),
), suffix=st.sampled_from([".smi", ".csv", ".npy"]))
@pytest.mark.slow
def test_random_bytes_never_raise(tmp_path_factory, content, suffix):
    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / f"data{suffix}"
    path.write_bytes(content)
    code, _, err = cli(["train", path, "--out", folder / "run", *tiny_args()])
    assert "Traceback" not in err
    assert code in (0, 2), err
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines[-1].startswith("seqvae: error: ")
