"""Damaged checkpoints fall back, mismatched run files are one line, failed writes lose nothing.

Each test breaks a copy of one tiny 20-step run (checkpoints kept: the last three) on purpose.
"""

import contextlib
import dataclasses
import gc
import io
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from conftest import SMILES, copy_run, file_size_limit, run_weights, tiny_config

from seqvae.errors import SeqvaeError
from seqvae.checkpoints import candidates, checkpoint_step
from seqvae.training.loop import train
from seqvae.training.steps import build_training
from seqvae.run import checkpoint_dir, load_run, read_run_files


def _config(**changes):
    config = tiny_config()
    return dataclasses.replace(config, train=dataclasses.replace(
        config.train, **{"max_steps": 20, "epochs": 1000, **changes}))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("pristine") / "run")
    train(_config(), run_dir, SMILES)
    return run_dir


def _copy(pristine, tmp_path) -> str:
    return copy_run(pristine, tmp_path / "copy")


def _data_file(prefix):
    return prefix + ".data-00000-of-00001"


def _truncate(prefix):
    path = _data_file(prefix)
    os.truncate(path, os.path.getsize(path) // 2)


def _flip_bytes(prefix):
    path = _data_file(prefix)
    data = bytearray(open(path, "rb").read())
    for i in range(0, len(data), 97):
        data[i] ^= 0xFF
    open(path, "wb").write(bytes(data))


def _remove_index_file(prefix):
    os.remove(prefix + ".index")


def _nan_weights(prefix):
    """Overwrites the checkpoint with one whose first weight is NaN (what a diverged run of an
    older seqvae saved)."""
    run = read_run_files(os.path.dirname(os.path.dirname(prefix)))
    model, optimizer, counters = build_training(run.config, run.max_len, len(run.vocab), 20)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, **counters)
    checkpoint.restore(prefix).assert_existing_objects_matched()
    model.trainable_variables[0].assign(tf.fill(model.trainable_variables[0].shape, np.nan))
    checkpoint.write(prefix)


DAMAGES = {"truncated": _truncate, "flipped bytes": _flip_bytes,
           "missing .index": _remove_index_file, "NaN weights": _nan_weights}


def _latest_two(run_dir):
    found = candidates(checkpoint_dir(run_dir))
    assert len(found) == 3 and checkpoint_step(found[0]) == 20
    return found[0], found[1]


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_load_run_falls_back_past_a_damaged_latest_checkpoint(pristine, tmp_path, damage, capsys):
    copy = _copy(pristine, tmp_path)
    latest, previous = _latest_two(copy)
    DAMAGES[damage](latest)
    capsys.readouterr()
    loaded = run_weights(copy)
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"seqvae: warning: checkpoint {latest} is damaged (")
    for a, b in zip(loaded, run_weights(pristine, previous.replace(copy, pristine))):
        np.testing.assert_array_equal(a, b)


def test_a_deleted_checkpoint_index_loses_nothing(pristine, tmp_path, capsys):
    copy = _copy(pristine, tmp_path)
    os.remove(os.path.join(checkpoint_dir(copy), "checkpoint"))
    for a, b in zip(run_weights(copy), run_weights(pristine)):
        np.testing.assert_array_equal(a, b)
    assert "warning" not in capsys.readouterr().err


def test_no_checkpoint_that_restores_is_one_line(pristine, tmp_path):
    copy = _copy(pristine, tmp_path)
    for prefix in candidates(checkpoint_dir(copy)):
        _truncate(prefix)
    with pytest.raises(SeqvaeError, match=r"no checkpoint restores \(3 damaged: ckpt-20, ckpt-16"):
        load_run(copy)


@pytest.mark.parametrize("left", ["nothing", "only the index"])
def test_a_checkpoints_folder_without_checkpoint_files(pristine, tmp_path, left):
    copy = _copy(pristine, tmp_path)
    folder = checkpoint_dir(copy)
    for name in os.listdir(folder):
        if not (left == "only the index" and name == "checkpoint"):
            os.remove(os.path.join(folder, name))
    if left == "only the index":  # it names three checkpoints whose files are gone
        with pytest.raises(SeqvaeError, match=r"no checkpoint restores \(3 damaged"):
            load_run(copy)
        return
    with pytest.raises(SeqvaeError, match="holds no checkpoint yet"):
        load_run(copy)
    summary = train(_config(), copy, SMILES, resume=True)  # as if killed before the first save
    assert summary["steps"] == 20
    for a, b in zip(run_weights(copy), run_weights(pristine)):
        np.testing.assert_array_equal(a, b)


def _cli(argv) -> tuple[int, str, str]:
    from seqvae.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def test_sample_past_a_truncated_latest_checkpoint(pristine, tmp_path):
    """What the issue found: ``seqvae sample`` of a run whose latest checkpoint was truncated
    ended in ``IndexError: Read less bytes than requested``."""
    copy = _copy(pristine, tmp_path)
    latest, _ = _latest_two(copy)
    _truncate(latest)
    code, out, err = _cli(["sample", copy, "-n", "3", "--seed", "1"])
    assert code == 0 and len(out.splitlines()) == 3, err
    assert "Traceback" not in err
    warnings = [line for line in err.splitlines() if "warning" in line.lower()]
    assert len(warnings) == 1, err
    assert warnings[0].startswith(f"seqvae: warning: checkpoint {latest} is damaged (")
    for prefix in candidates(checkpoint_dir(copy)):
        _truncate(prefix)
    code, out, err = _cli(["sample", copy, "-n", "3"])
    assert code == 2 and not out and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"seqvae: error: {copy}: no checkpoint restores")


def _edit_json(path, edit):
    with open(path) as handle:
        value = json.load(handle)
    with open(path, "w") as handle:
        json.dump(edit(value), handle)


def _wider_decoder(config):
    config["model"]["decoder_units"] += 1
    return config


def _one_token_less(copy):
    _edit_json(os.path.join(copy, "vocab.json"), lambda v: {**v, "tokens": v["tokens"][:-1]})
    _edit_json(os.path.join(copy, "run.json"), lambda v: {**v, "vocab_size": v["vocab_size"] - 1})


@pytest.mark.parametrize("edit", ["config", "vocab"])
def test_run_files_that_disagree_with_the_weights_are_one_line(pristine, tmp_path, edit, capfd):
    copy = _copy(pristine, tmp_path)
    if edit == "config":
        _edit_json(os.path.join(copy, "config.json"), _wider_decoder)
    else:
        _one_token_less(copy)
    capfd.readouterr()
    with pytest.raises(SeqvaeError, match="config.json or vocab.json disagrees with the weights"):
        load_run(copy)
    gc.collect()  # TensorFlow's warnings about unrestored values come when objects are collected
    assert "WARNING" not in capfd.readouterr().err


def test_truncated_vocab_is_one_line(pristine, tmp_path):
    copy = _copy(pristine, tmp_path)
    path = os.path.join(copy, "vocab.json")
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(SeqvaeError, match="vocab.json"):
        load_run(copy)


def test_resume_past_a_damaged_checkpoint_ends_bit_exact(pristine, tmp_path, capsys):
    copy = _copy(pristine, tmp_path)
    latest, previous = _latest_two(copy)
    _flip_bytes(latest)
    # and what saves cut off by kills leave behind, as TensorFlow names it
    folder = checkpoint_dir(copy)
    orphans = [os.path.join(folder, "ckpt-12_temp"), os.path.join(folder, "checkpoint.tmp5f3a"),
               _data_file(latest) + ".tempstate8812"]
    os.makedirs(orphans[0])
    shutil.copy(_data_file(previous), os.path.join(orphans[0], "part-00000-of-00001.data-00000-of-00001"))
    for path in orphans[1:]:
        open(path, "wb").write(b"half")
    summary = train(_config(), copy, SMILES, resume=True)
    assert not any(os.path.exists(path) for path in orphans)
    assert summary["steps"] == 20 and not summary.get("already_finished")
    assert f"checkpoint {latest} is damaged" in capsys.readouterr().err
    for a, b in zip(run_weights(copy), run_weights(pristine)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_a_checkpoint_write_that_fails_halfway_leaves_the_previous_one(pristine, tmp_path,
                                                                       monkeypatch):
    save, calls = tf.train.CheckpointManager.save, []

    def failing_second_save(self, *args, **kwargs):
        calls.append(kwargs.get("checkpoint_number"))
        if len(calls) != 2:
            return save(self, *args, **kwargs)
        with file_size_limit(2000):  # the data file is cut at 2,000 bytes
            return save(self, *args, **kwargs)

    monkeypatch.setattr(tf.train.CheckpointManager, "save", failing_second_save)
    run_dir = str(tmp_path / "run")
    with pytest.raises(SeqvaeError) as caught:
        train(_config(), run_dir, SMILES)
    message, folder = str(caught.value), checkpoint_dir(run_dir)
    first, second = calls
    assert "\n" not in message
    assert f"cannot write checkpoint {os.path.join(folder, f'ckpt-{second}')} (" in message
    assert f"the latest checkpoint {os.path.join(folder, f'ckpt-{first}')} is intact" in message
    assert tf.train.latest_checkpoint(folder).endswith(f"ckpt-{first}")
    assert sorted(os.listdir(folder)) == ["checkpoint", f"ckpt-{first}.data-00000-of-00001",
                                          f"ckpt-{first}.index"]
    load_run(run_dir)
    monkeypatch.undo()
    summary = train(_config(), run_dir, SMILES, resume=True)  # the disk has room again
    assert summary["steps"] == 20
    for a, b in zip(run_weights(run_dir), run_weights(pristine)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("float16", [False, True])
def test_a_model_only_checkpoint_restores_like_a_training_one(pristine, tmp_path, float16):
    from seqvae.checkpoints import float32_readable, save_model_only

    run = load_run(pristine)
    copy = _copy(pristine, tmp_path)
    shutil.rmtree(checkpoint_dir(copy))
    prefix = save_model_only(run.model, checkpoint_dir(copy), 20, float16=float16)
    again = save_model_only(run.model, str(tmp_path / "again"), 20, float16=float16)
    for suffix in (".index", ".data-00000-of-00001"):  # the same weights, the same bytes
        with open(prefix + suffix, "rb") as mine, open(again + suffix, "rb") as theirs:
            assert mine.read() == theirs.read()
    assert tf.train.latest_checkpoint(checkpoint_dir(copy)) == prefix
    dtypes = set(tf.train.load_checkpoint(prefix).get_variable_to_dtype_map().values())
    assert (tf.float16 in dtypes) == float16 and (tf.float32 in dtypes) != float16
    loaded = load_run(copy)
    assert loaded.checkpoint == prefix
    for mine, theirs in zip(loaded.model.weights, run.model.weights):
        assert mine.dtype == theirs.dtype
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), atol=1e-3 if float16 else 0)
    with float32_readable(prefix) as readable:  # float16: a float32 copy in memory
        assert (readable != prefix) == float16
        assert tf.io.gfile.exists(readable + ".index")
    if float16:
        assert not tf.io.gfile.exists(os.path.dirname(readable))  # removed afterwards
