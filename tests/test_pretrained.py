"""Models that ship inside seqvae (``pretrained:NAME``): the session's tiny run, given an
aggregate prior and a property head, shipped by scripts/ship_pretrained.py into a folder of its
own (``$SEQVAE_PRETRAINED_DIR``), made read-only, and used by the commands as a run directory."""

import importlib.util
import json
import os
import shutil
import stat

import numpy as np
import pytest
from conftest import HELD_OUT, SMILES, copy_run

from seqvae import inference, latent_prior, pretrained
from seqvae.cli import main
from seqvae.errors import SeqvaeError
from seqvae.run import load_run, read_run_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METRICS = {"valid": 0.5, "unique@1000": 1.0, "FCD/Test": 12.5}


def _script():
    spec = importlib.util.spec_from_file_location(
        "ship_pretrained", os.path.join(ROOT, "scripts", "ship_pretrained.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SHIP = _script()


def _snapshot(folder) -> dict:
    """``{path: (size, mtime, mode)}`` of everything under ``folder``: a write shows."""
    found = {}
    for parent, subfolders, names in os.walk(folder):
        for name in subfolders + names:
            path = os.path.join(parent, name)
            info = os.stat(path)
            found[os.path.relpath(path, folder)] = (info.st_size if name in names else 0,
                                                    info.st_mtime_ns, info.st_mode)
    return found


def _read_only(folder) -> None:
    for parent, subfolders, names in os.walk(folder):
        for name in names:
            os.chmod(os.path.join(parent, name), stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        os.chmod(parent, stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP
                 | stat.S_IROTH | stat.S_IXOTH)


def _writable(folder) -> None:
    for parent, _, names in os.walk(folder):
        os.chmod(parent, 0o755)
        for name in names:
            os.chmod(os.path.join(parent, name), 0o644)


@pytest.fixture(scope="module")
def source_run(tiny_run_dir, tmp_path_factory):
    """A copy of the tiny run with what a shipped model holds: an aggregate prior (fitted to
    its training molecules) and a property head."""
    from seqvae.property_fit import fit_properties

    folder = tmp_path_factory.mktemp("source")
    run_dir = copy_run(tiny_run_dir, folder / "run")
    data = folder / "molecules.smi"
    data.write_text("".join(f"{s}\n" for s in SMILES))
    run = load_run(run_dir)
    mean, log_var = inference.encode_batches(run, inference.encode_ids(run, SMILES).ids)
    latent_prior.save(run_dir, latent_prior.fit_aggregate(mean, log_var, "molecules.smi", 1.2))
    fit_properties(run_dir, "logp,qed", data=str(data), limit=0, test=None, epochs=2)
    return run_dir


@pytest.fixture(scope="module")
def shipped(source_run, tmp_path_factory):
    """The root of the shipped models (``$SEQVAE_PRETRAINED_DIR``, read-only): ``tiny`` as it
    is, ``half`` in float16 with 20 of the prior's kernels; and a fresh user cache."""
    root = tmp_path_factory.mktemp("pretrained")
    metrics = tmp_path_factory.mktemp("metrics") / "metrics.json"
    metrics.write_text(json.dumps(METRICS))
    patch = pytest.MonkeyPatch()
    patch.setenv(pretrained.ROOT_ENV, str(root))
    patch.setenv("SEQVAE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    assert SHIP.main([source_run, "tiny", "--metrics", str(metrics), "--cpu", "a test CPU",
                      "--command", "seqvae train molecules.smi --out runs/tiny"]) == 0
    assert SHIP.main([source_run, "half", "--root", str(root), "--float16",
                      "--prior-kernels", "20", "--train-steps", "120", "--train-hours", "2"]) == 0
    for name in ("tiny", "half"):
        _read_only(root / name)
    yield root
    for name in os.listdir(root):
        _writable(root / name)
    patch.undo()


def test_the_shipped_folder_holds_a_consumers_files_and_their_sums(shipped):
    folder = shipped / "tiny"
    manifest = json.loads((folder / pretrained.MANIFEST).read_text())
    assert set(manifest["files"]) == {
        "run.json", "config.json", "vocab.json", "metrics.jsonl", "latent_prior.npz",
        "checkpoints/checkpoint", "checkpoints/ckpt-20.index",
        "checkpoints/ckpt-20.data-00000-of-00001", "property_head/head.json",
        "property_head/head.weights.h5"}
    for name, entry in manifest["files"].items():
        assert pretrained.file_sha256(str(folder / name)) == entry["sha256"]
    assert manifest["metrics"] == METRICS and manifest["training"]["cpu"] == "a test CPU"
    assert manifest["training"]["steps"] == 20 and manifest["training"]["seconds"] > 0
    assert manifest["weights"] == {"checkpoint": "checkpoints/ckpt-20", "dtype": "float32"}
    half = json.loads((shipped / "half" / pretrained.MANIFEST).read_text())  # two stages' sums
    assert half["training"]["steps"] == 120 and half["training"]["seconds"] == 7200
    assert half["weights"]["checkpoint"] == "checkpoints/ckpt-20"
    import tensorflow as tf

    stored = dict(tf.train.list_variables(str(folder / "checkpoints" / "ckpt-20")))
    assert not any(name.startswith("optimizer") for name in stored)  # the model alone


def test_load_run_resolves_pretrained_names_and_restores_the_weights(shipped, source_run):
    run = load_run("pretrained:tiny")
    assert run.pretrained == "tiny" and run.name == "pretrained:tiny"
    assert os.path.samefile(run.run_dir, shipped / "tiny")
    assert read_run_files("pretrained:tiny").pretrained == "tiny"
    assert load_run(str(shipped / "tiny")).pretrained == "tiny"  # by its path too
    original = load_run(source_run)
    assert original.pretrained is None
    for mine, theirs in zip(run.model.weights, original.model.weights):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    with pytest.raises(SeqvaeError, match="pretrained:nope: no such pretrained model; the "
                                          "models that ship are pretrained:half, pretrained:tiny"):
        load_run("pretrained:nope")


def test_samples_are_identical_at_float32_and_close_at_float16(shipped, source_run):
    from seqvae.data.chemistry import to_mol

    original, tiny, half = (load_run(r) for r in (source_run, "pretrained:tiny", "pretrained:half"))
    for prior in ("standard", "fitted"):
        assert (inference.sample(tiny, 64, seed=3, prior=prior)
                == inference.sample(original, 64, seed=3, prior=prior))
    for mine, theirs in zip(half.model.weights, original.model.weights):
        assert mine.dtype == theirs.dtype
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-3, atol=1e-3)
    drawn = [inference.sample(run, 200, seed=5, prior="standard") for run in (original, half)]
    same = np.mean([a == b for a, b in zip(*drawn)])
    valid = [np.mean([to_mol(s) is not None for s in texts]) for texts in drawn]
    assert same >= 0.9 and abs(valid[0] - valid[1]) <= 0.05, (same, valid)


def test_a_float16_prior_with_fewer_kernels_loads_as_float32(shipped, source_run):
    with np.load(shipped / "half" / latent_prior.FILENAME) as stored:
        assert stored["means"].dtype == np.float16 and stored["means"].shape[0] == 20
    full, kept = latent_prior.load(source_run), latent_prior.load(str(shipped / "half"))
    assert kept.means.dtype == np.float32 and kept.sequences == 20 and kept.widen == full.widen
    rows = [int(np.argmin(np.abs(full.means - row).sum(axis=1))) for row in kept.means]
    np.testing.assert_allclose(kept.means, full.means[rows], atol=2e-3)  # kernels of the full
    z = inference.prior_draw(load_run("pretrained:half"), 50, seed=0, prior="fitted")
    assert z.shape == (50, 4) and np.isfinite(z).all()


def test_commands_take_pretrained_names_and_write_nothing_into_the_folder(
        shipped, tmp_path, capsys):
    before = _snapshot(shipped)
    molecules = tmp_path / "molecules.smi"
    molecules.write_text("".join(f"{s}\n" for s in HELD_OUT))
    assert main(["sample", "pretrained:tiny", "-n", "5", "--seed", "1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5
    assert main(["encode", "pretrained:half", str(molecules), "--out",
                 str(tmp_path / "z.npy")]) == 0
    assert np.load(tmp_path / "z.npy").shape == (len(HELD_OUT), 4)
    assert main(["decode", "pretrained:tiny", str(tmp_path / "z.npy")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(HELD_OUT)
    assert main(["interpolate", "pretrained:tiny", "CCO", "CCN", "--steps", "3"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["predict", "pretrained:tiny", str(molecules)]) == 0
    assert capsys.readouterr().out.startswith("smiles,logp,qed\n")
    assert main(["export", "pretrained:tiny", "--out", str(tmp_path / "exported")]) == 0
    assert _snapshot(shipped) == before


def test_evaluate_writes_its_report_and_caches_to_the_user_cache(shipped, tmp_path, capsys):
    before = _snapshot(shipped)
    molecules = tmp_path / "held_out.smi"
    molecules.write_text("".join(f"{s}\n" for s in HELD_OUT))
    args = ["evaluate", "pretrained:tiny", "-n", "20", "--no-fcd", "--test", str(molecules),
            "--train", str(molecules), "--recon-molecules", "2", "--quality-sequences", "5",
            "--quiet"]
    assert main(args) == 0
    cache = pretrained.cache_folder("tiny")
    assert cache.startswith(os.environ["SEQVAE_CACHE_DIR"])
    assert os.path.exists(os.path.join(cache, "report", "metrics.json"))
    assert os.listdir(os.path.join(cache, "properties"))  # the head's test properties
    assert f"report: {os.path.join(cache, 'report')}" in capsys.readouterr().out
    assert main(args + ["--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "metrics.json").exists()
    assert _snapshot(shipped) == before


def test_the_explorer_keeps_its_map_in_the_user_cache(shipped, tmp_path):
    from seqvae.explore.latent_map import build_map

    before = _snapshot(shipped)
    molecules = tmp_path / "map.smi"
    molecules.write_text("".join(f"{s}\n" for s in SMILES))
    built = build_map(load_run("pretrained:tiny"), str(molecules), n=20, progress=None)
    assert len(built) >= 2
    assert any(name.startswith("map-")
               for name in os.listdir(pretrained.cache_folder("tiny", "explore")))
    assert _snapshot(shipped) == before


@pytest.mark.parametrize("argv, action", [
    (["fit-prior", "pretrained:tiny"], "seqvae fit-prior"),
    (["fit-properties", "pretrained:tiny", "--no-test"], "seqvae fit-properties"),
    (["train", "--out", "pretrained:tiny", "--resume"], "seqvae train"),
])
def test_commands_that_would_change_it_refuse_in_one_line(shipped, argv, action, capsys):
    before = _snapshot(shipped)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "read-only" in err and action in err
    assert "seqvae finetune pretrained:tiny DATA --out RUN" in err
    assert _snapshot(shipped) == before


def test_training_into_the_folder_by_its_path_refuses_too(shipped, capsys):
    assert main(["train", "--out", str(shipped / "tiny"), "--resume"]) == 2
    assert "pretrained:tiny ships with seqvae and is read-only" in capsys.readouterr().err
    with pytest.raises(SeqvaeError, match="read-only"):
        inference.fit_prior(load_run("pretrained:tiny"), SMILES)


def test_finetune_starts_from_a_pretrained_model(shipped, tmp_path, capsys):
    data = tmp_path / "mine.smi"
    data.write_text("".join(f"{s}\n" for s in SMILES + HELD_OUT))
    out = str(tmp_path / "mine")
    assert main(["finetune", "pretrained:tiny", str(data), "--out", out, "-n", "0",
                 "--max-steps", "2", "--min-steps", "1", "--epochs", "1"]) == 0
    tuned = load_run(out)
    assert tuned.pretrained is None and tuned.output_dir("report") == os.path.join(out, "report")


def test_a_damaged_or_missing_file_is_one_line_naming_it(shipped, tmp_path, monkeypatch, capsys):
    root = tmp_path / "root"
    shutil.copytree(shipped / "tiny", root / "tiny")
    _writable(root)
    monkeypatch.setenv(pretrained.ROOT_ENV, str(root))
    data = root / "tiny" / "checkpoints" / "ckpt-20.data-00000-of-00001"
    whole = data.read_bytes()
    raw = bytearray(whole)
    raw[100] ^= 0xFF
    data.write_bytes(bytes(raw))
    assert main(["sample", "pretrained:tiny", "-n", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(data) in err and "damaged" in err and "reinstall" in err
    data.write_bytes(whole)
    os.remove(root / "tiny" / "latent_prior.npz")
    with pytest.raises(SeqvaeError, match=r"latent_prior.npz: missing .* reinstall"):
        read_run_files("pretrained:tiny")


def test_seqvae_pretrained_lists_what_ships(shipped, capsys):
    assert [entry["name"] for entry in pretrained.available()] == ["half", "tiny"]
    assert main(["pretrained"]) == 0
    out = capsys.readouterr().out
    assert "pretrained:tiny  trained on list (36 training and 4 validation sequences)" in out
    assert "valid 0.5 · unique@1000 1 · FCD/Test 12.5" in out
    assert "trained by: seqvae train molecules.smi --out runs/tiny" in out
    assert "20 steps" in out and "on a test CPU" in out and " kB" in out
    assert main(["pretrained", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "checkpoints/ckpt-20.data-00000-of-00001" in out and "sha256" in out
    assert pretrained.cache_folder("tiny") in out
    assert main(["pretrained", "nope"]) == 2


def test_with_nothing_shipped_the_listing_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(pretrained.ROOT_ENV, str(tmp_path))
    assert pretrained.available() == [] and pretrained.names() == []
    assert main(["pretrained"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("no pretrained model ships")


def test_the_script_keeps_an_existing_model_unless_forced(shipped, source_run, tmp_path):
    root = tmp_path / "root"
    assert SHIP.main([source_run, "again", "--root", str(root)]) == 0
    with pytest.raises(SystemExit):
        SHIP.main([source_run, "again", "--root", str(root)])
    assert SHIP.main([source_run, "again", "--root", str(root), "--force",
                      "--prior-float16"]) == 0
    assert json.loads((root / "again" / pretrained.MANIFEST).read_text())["prior"]["dtype"] == \
        "float16"
    assert sorted(os.listdir(root)) == ["again"]  # no staging folder left


def test_shipped_reference_properties_steer_where_without_computing(shipped, source_run,
                                                                   tmp_path, monkeypatch):
    from seqvae.conditional import kernels, sample_where
    from seqvae.data.properties import RDKIT_PROPERTIES, rdkit_properties

    run_dir = copy_run(source_run, tmp_path / "run")
    data = tmp_path / "molecules.smi"
    data.write_text("".join(f"{s}\n" for s in SMILES))
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    (tmp_path / "run" / "run.json").write_text(json.dumps({**info, "data_source": str(data)}))
    root = tmp_path / "root"
    assert SHIP.main([run_dir, "ref", "--root", str(root), "--reference", "12"]) == 0
    manifest = json.loads((root / "ref" / pretrained.MANIFEST).read_text())
    assert "properties/reference.npz" in manifest["files"]
    monkeypatch.setenv(pretrained.ROOT_ENV, str(root))
    monkeypatch.setenv("SEQVAE_CACHE_DIR", str(tmp_path / "cache"))
    run = load_run("pretrained:ref")
    table = kernels.reference_table(run, ("qed", "logp"))
    assert table.texts == SMILES[:12] and table.names == ("qed", "logp")
    np.testing.assert_allclose(table.values, rdkit_properties(SMILES[:12], ("qed", "logp")))
    assert kernels.reference_table(run, RDKIT_PROPERTIES).names == RDKIT_PROPERTIES  # all ship
    found = sample_where(run, 3, "logp>=-10", seed=0, max_draws=200)
    assert "z near" in found.steering and "12 molecules" in found.steering
    assert not (tmp_path / "cache").exists()  # nothing computed or cached
