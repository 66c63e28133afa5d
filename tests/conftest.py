"""Shared fixtures: quiet TensorFlow and tiny configurations."""

import collections
import contextlib
import os
import resource
import signal

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from seqvae import messages, runtime  # noqa: E402

runtime.tune_process()  # the tests run TensorFlow as the command line does
messages.show_on_stderr()  # and see the library's lines on stderr as its users do

import pytest  # noqa: E402

from seqvae.config import Config, DataConfig, ModelConfig, TrainConfig  # noqa: E402

def pytest_collection_modifyitems(items):
    """Files with the most ``slow`` tests run first (order within a file kept): the test
    workers (pytest-xdist, a file each) then end together instead of one running a long file
    alone."""
    slow = collections.Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])


SMILES = ["CCO", "c1ccccc1", "CC(=O)O", "CCN(CC)CC", "c1ccncc1", "CC(C)Cl", "OCC(O)CO", "CCBr",
          "C1CCCCC1", "c1ccc2ccccc2c1", "CC#N", "O=C=O", "CC(=O)Nc1ccc(O)cc1", "CCOC(=O)C",
          "c1cc[nH]c1", "FC(F)(F)c1ccccc1", "CCCCCC", "NCC(=O)O", "CSC", "C=CC=C"] * 2


def tiny_config(**model) -> Config:
    """A model small enough for unit tests (seconds per test)."""
    base = dict(encoder_units=16, latent_dim=4, decoder_units=16, decoder_layers=2)
    base.update(model)
    return Config(model=ModelConfig(**base), data=DataConfig(validation_fraction=0.1),
                  train=TrainConfig(batch_size=8, epochs=1, log_every=2, checkpoint_every=4,
                                    learning_rate=1e-2, export_at_end=False))


def with_train(config: Config, **changes) -> Config:
    """``config`` with ``changes`` to its train section."""
    import dataclasses

    return dataclasses.replace(config, train=dataclasses.replace(config.train, **changes))


def run_weights(run_dir, checkpoint=None) -> list:
    """Every weight of the run's model as loaded by ``load_run`` (numpy arrays, in order)."""
    from seqvae.run import load_run

    return [v.numpy() for v in load_run(str(run_dir), checkpoint).model.weights]


def copy_run(run_dir, destination) -> str:
    """Copies a run directory to ``destination`` (a new folder), leaving out its training
    lock; the copy's path."""
    import shutil

    shutil.copytree(run_dir, destination, ignore=shutil.ignore_patterns(".lock"))
    return str(destination)


@pytest.fixture
def smiles():
    return list(SMILES)


def train_tiny_run(folder, steps: int = 20):
    """Trains ``tiny_config`` on SMILES for ``steps`` steps into ``folder/run``; the loaded Run."""
    import dataclasses

    from seqvae.training.loop import train
    from seqvae.run import load_run

    config = tiny_config()
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, max_steps=steps,
                                                                   epochs=1000))
    run_dir = str(folder / "run")
    train(config, run_dir, data=SMILES)
    return load_run(run_dir)


# Held-out molecules written with the training set's tokens only.
HELD_OUT = ["CCCO", "CCN", "c1ccccc1C", "CC(=O)N", "OCCO", "CCCl", "c1ccc(Br)cc1", "CC(C)(C)O",
            "CCOC", "NCCO"]


@pytest.fixture(scope="module")
def run(tiny_run_dir, tmp_path_factory):
    """A copy of the session's tiny run (20 steps on SMILES) for each test module, loaded: a
    module may write into it (property heads, priors, reports) without the others seeing it."""
    from seqvae.run import load_run

    return load_run(copy_run(tiny_run_dir, tmp_path_factory.mktemp("run") / "run"))


@contextlib.contextmanager
def file_size_limit(size: int):
    """Writes past ``size`` bytes fail (``EFBIG``) in this process, as a full disk fails with
    ``ENOSPC``: a writer cut off halfway (RLIMIT_FSIZE; its SIGXFSZ is ignored meanwhile)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


# Reference statistics are cached on disk (seqvae.evaluation.reference_cache): tests fill a
# throw-away folder, never the user's cache.
if not os.environ.get("SEQVAE_CACHE_DIR"):
    import tempfile  # noqa: E402

    os.environ["SEQVAE_CACHE_DIR"] = tempfile.mkdtemp(prefix="seqvae-test-cache-")


@pytest.fixture(scope="session")
def tiny_run_dir(tmp_path_factory) -> str:
    """The directory of a tiny run trained once per test session (tests that only read it, or
    write beside its files, share it)."""
    return train_tiny_run(tmp_path_factory.mktemp("shared-run")).run_dir
