"""The SavedModel serves without seqvae and gives seqvae's own outputs."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import SMILES, tiny_config

from seqvae import inference
from seqvae.export import export
from seqvae.training.loop import train
from seqvae.training.rundir import load_run

SERVE = r"""
import json, sys
import tensorflow as tf
model = tf.saved_model.load(sys.argv[1])
smiles = json.loads(sys.argv[2])
encoded = model.signatures["encode"](sequences=tf.constant(smiles))
decoded = model.signatures["decode"](z=encoded["z_mean"])["sequences"]
sampled = model.signatures["sample"](n=tf.constant(30), temperature=tf.constant(0.9),
                                     seed=tf.constant(5, tf.int64))["sequences"]
assert not any(name.startswith("seqvae") for name in sys.modules), "seqvae was imported"
print(json.dumps({"notation": model.notation.numpy().decode(),
                  "z_mean": encoded["z_mean"].numpy().tolist(),
                  "z_log_var": encoded["z_log_var"].numpy().tolist(),
                  "decoded": [s.decode() for s in decoded.numpy()],
                  "sampled": [s.decode() for s in sampled.numpy()]}))
"""


def _as_smiles(texts, tokenizer):
    """What seqvae's API returns for the export's strings: SMILES for SELFIES runs too."""
    if tokenizer != "selfies":
        return texts
    from seqvae.data.tokenizers import SelfiesTokenizer
    from seqvae.errors import SeqvaeError

    out = []
    for text in texts:
        try:
            out.append(SelfiesTokenizer.to_smiles(text))
        except SeqvaeError:
            out.append("")
    return out


@pytest.mark.parametrize("tokenizer", ["smiles", "selfies", "char"])
def test_saved_model_matches_seqvae_in_a_fresh_process(tmp_path, tokenizer):
    """The export speaks the run's notation (SELFIES for SELFIES runs, both ways); converted to
    SMILES, its outputs equal seqvae's, whose API speaks SMILES for every molecule run."""
    import dataclasses

    config = tiny_config()
    config = dataclasses.replace(config, data=dataclasses.replace(config.data, tokenizer=tokenizer),
                                 train=dataclasses.replace(config.train, max_steps=10, epochs=5))
    run_dir = str(tmp_path / "run")
    train(config, run_dir, SMILES)
    out = export(run_dir, str(tmp_path / "exported"))
    queries = ["CCO", "c1ccccc1", "CC(=O)O", "CCN(CC)CC", "c1cc[nH]c1"]
    served_queries = queries
    if tokenizer == "selfies":
        from seqvae.data.tokenizers import SelfiesTokenizer

        served_queries = [SelfiesTokenizer.from_smiles(q) for q in queries]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", SERVE, out, json.dumps(served_queries)],
                            capture_output=True, text=True, cwd=str(tmp_path), env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])
    run = load_run(run_dir)
    mean, log_var = inference.encode(run, queries)
    np.testing.assert_allclose(served["z_mean"], mean, atol=1e-5)
    np.testing.assert_allclose(served["z_log_var"], log_var, atol=1e-5)
    assert served["notation"] == tokenizer
    assert _as_smiles(served["decoded"], tokenizer) == inference.decode(run, mean)
    assert _as_smiles(served["sampled"], tokenizer) == inference.sample(run, 30, temperature=0.9,
                                                                        seed=5)


def test_training_exports_at_the_end(tmp_path):
    import dataclasses

    config = tiny_config()
    config = dataclasses.replace(config, train=dataclasses.replace(
        config.train, max_steps=2, epochs=5, export_at_end=True))
    run_dir = str(tmp_path / "run")
    train(config, run_dir, SMILES)
    assert os.path.exists(os.path.join(run_dir, "saved_model", "saved_model.pb"))
