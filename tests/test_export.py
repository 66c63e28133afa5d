"""The SavedModel serves without seqvae and gives seqvae's own outputs."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import SMILES, copy_run, tiny_config

from seqvae import inference
from seqvae.export import export
from seqvae.workflows import train
from seqvae.run import load_run

SERVE = r"""
import json, sys
import tensorflow as tf
served = []
for path, smiles, unreadable in json.loads(sys.argv[1]):  # [[export dir, queries, bad], ...]
    model = tf.saved_model.load(path)
    try:
        model.signatures["encode"](sequences=tf.constant(["CCO", unreadable]))
        refused = None
    except tf.errors.InvalidArgumentError as error:
        refused = error.message
    encoded = model.signatures["encode"](sequences=tf.constant(smiles))
    decoded = model.signatures["decode"](z=encoded["z_mean"])["sequences"]
    sampled = model.signatures["sample"](n=tf.constant(30), temperature=tf.constant(0.9),
                                         seed=tf.constant(5, tf.int64))["sequences"]
    served.append({"notation": model.notation.numpy().decode(),
                   "z_mean": encoded["z_mean"].numpy().tolist(),
                   "z_log_var": encoded["z_log_var"].numpy().tolist(),
                   "decoded": [s.decode() for s in decoded.numpy()],
                   "sampled": [s.decode() for s in sampled.numpy()], "refused": refused})
assert not any(name.startswith("seqvae") for name in sys.modules), "seqvae was imported"
print(json.dumps(served))
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


@pytest.mark.slow
def test_saved_model_matches_seqvae_in_a_fresh_process(tmp_path, tiny_run_dir):
    """The export speaks the run's notation (SELFIES for SELFIES runs, both ways); converted to
    SMILES, its outputs equal seqvae's, whose API speaks SMILES for every molecule run. One
    fresh process without seqvae serves the three runs' exports (the SMILES one is the
    session's tiny run; the text run's is the one its training wrote at the end,
    ``train.export_at_end``)."""
    import dataclasses

    from seqvae.data.tokenizers import SelfiesTokenizer

    tokenizers = ["smiles", "selfies", "char", "smiles", "smiles"]
    queries = ["CCO", "c1ccccc1", "CC(=O)O", "CCN(CC)CC", "c1cc[nH]c1"]
    requests, run_dirs = [], []
    for index, tokenizer in enumerate(tokenizers):
        run_dir = tiny_run_dir if tokenizer == "smiles" else str(tmp_path / tokenizer / "run")
        if index == 3:  # by rejection under the grammar, from the aggregate posterior (the demo)
            run_dir = copy_run(tiny_run_dir, tmp_path / "aggregate" / "run")
            with open(os.path.join(run_dir, "config.json")) as handle:
                stored = json.load(handle)
            stored["model"].update(rejection_rounds=3, prior="aggregate", prior_widen=1.3)
            with open(os.path.join(run_dir, "config.json"), "w") as handle:
                json.dump(stored, handle)
            inference.fit_prior(load_run(run_dir), SMILES, aggregate=True)
        elif index == 4:  # a decoder that reads the grammar's state (model.grammar_features)
            run_dir = str(tmp_path / "features" / "run")
            config = tiny_config(grammar_features=True)
            train(dataclasses.replace(config, train=dataclasses.replace(
                config.train, max_steps=10, epochs=5)), run_dir, SMILES)
        elif tokenizer != "smiles":
            config = tiny_config()
            config = dataclasses.replace(
                config, data=dataclasses.replace(config.data, tokenizer=tokenizer),
                train=dataclasses.replace(config.train, max_steps=10, epochs=5,
                                          export_at_end=tokenizer == "char"))
            train(config, run_dir, SMILES)
        served_queries = ([SelfiesTokenizer.from_smiles(q) for q in queries]
                          if tokenizer == "selfies" else queries)
        exported = (os.path.join(run_dir, "saved_model") if tokenizer == "char"
                    else export(run_dir, str(tmp_path / f"{tokenizer}{index}" / "exported")))
        # what each export cannot read: SMILES into SELFIES, a token outside the vocabulary
        requests.append([exported, served_queries, "c1ccccc1Cl" if tokenizer == "selfies"
                         else "CC[Pt]" if tokenizer == "smiles" else "CC§"])
        run_dirs.append(run_dir)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", SERVE, json.dumps(requests)],
                            capture_output=True, text=True, cwd=str(tmp_path), env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    answers = json.loads(result.stdout.strip().splitlines()[-1])
    for tokenizer, run_dir, served in zip(tokenizers, run_dirs, answers):
        run = load_run(run_dir)
        run.raw_output = True  # the export returns the model's own strings, not canonical ones
        expected = {"selfies": "the model reads SELFIES (convert SMILES with selfies.encoder)",
                    "smiles": "the model reads SMILES;", "char": "the model reads characters;"}
        assert expected[tokenizer] in served["refused"] and "lacks" in served["refused"], served
        mean, log_var = inference.encode(run, queries)
        np.testing.assert_allclose(served["z_mean"], mean, atol=1e-5)
        np.testing.assert_allclose(served["z_log_var"], log_var, atol=1e-5)
        assert served["notation"] == tokenizer
        assert _as_smiles(served["decoded"], tokenizer) == inference.decode(run, mean), tokenizer
        assert _as_smiles(served["sampled"], tokenizer) == inference.sample(
            run, 30, temperature=0.9, seed=5), tokenizer
    stats = {}
    aggregate = load_run(run_dirs[3])  # sampled from its own prior by default, served too
    aggregate.raw_output = True
    assert answers[3]["sampled"] == inference.sample(aggregate, 30, temperature=0.9, seed=5,
                                                     prior="fitted", rejection=3, stats=stats)
    assert answers[3]["sampled"] != answers[0]["sampled"] and stats["rejected"] > 0
    assert load_run(run_dirs[4]).config.model.grammar_features


# --- hostile requests: a clean error for that request, and the server carries on ---------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from seqvae.export import MAX_SAMPLE_N  # noqa: E402

REQUESTS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_run_dir):
    """The session's tiny run's SavedModel, loaded as a server would load it."""
    import tensorflow as tf

    folder = tmp_path_factory.mktemp("served")
    return tf.saved_model.load(export(tiny_run_dir, str(folder / "exported")))


def _still_serves(model):
    import tensorflow as tf

    out = model.signatures["sample"](n=tf.constant(2), temperature=tf.constant(1.0),
                                     seed=tf.constant(0, tf.int64))["sequences"]
    assert out.shape == (2,)


@REQUESTS
@given(texts=st.lists(st.one_of(st.text(max_size=40), st.sampled_from(
    ["", "Xx§", "[Zz]", "\x1f\x1f", "C" * 200, "é" * 50, "[", "]" * 3, " ", "\n\t"])), max_size=6))
def test_encode_any_strings(served, texts):
    """Text the run can read gets a finite z; any other is an InvalidArgumentError naming the
    notation and the inputs, never a z for a string the model cannot read."""
    import tensorflow as tf

    try:
        out = served.signatures["encode"](sequences=tf.constant(texts, tf.string))
    except tf.errors.InvalidArgumentError as error:
        assert "the model reads" in error.message and "SMILES" in error.message
    else:
        assert out["z_mean"].shape == (len(texts), 4)
        assert np.isfinite(out["z_mean"].numpy()).all()
    _still_serves(served)


def test_encode_refuses_a_million_characters(served):
    import tensorflow as tf

    with pytest.raises(tf.errors.InvalidArgumentError, match="at most .* tokens of SMILES"):
        served.signatures["encode"](sequences=tf.constant(["C" * 10**6, "", "CCO"]))
    out = served.signatures["encode"](sequences=tf.constant(["", "CCO"]))
    assert out["z_mean"].shape == (2, 4) and np.isfinite(out["z_mean"].numpy()).all()


@REQUESTS
@given(n=st.one_of(st.integers(-3, 20), st.sampled_from([0, -1, MAX_SAMPLE_N + 1, 2**31 - 1,
                                                          -(2**31)])),
       temperature=st.one_of(st.floats(-10, 10), st.sampled_from([0.0, float("nan"),
                                                                  float("inf"), 1e30])),
       seed=st.integers(-(2**63), 2**63 - 1))
def test_sample_any_request(served, n, temperature, seed):
    import tensorflow as tf

    request = dict(n=tf.constant(n, tf.int32), temperature=tf.constant(temperature, tf.float32),
                   seed=tf.constant(seed, tf.int64))
    if 0 <= n <= MAX_SAMPLE_N and np.isfinite(np.float32(temperature)):
        assert served.signatures["sample"](**request)["sequences"].shape == (n,)
    else:
        with pytest.raises(tf.errors.InvalidArgumentError, match="sample: (n must|temperature)"):
            served.signatures["sample"](**request)
    _still_serves(served)


def test_sample_at_the_documented_limit(served):
    import tensorflow as tf

    out = served.signatures["sample"](n=tf.constant(MAX_SAMPLE_N), temperature=tf.constant(1.0),
                                      seed=tf.constant(3, tf.int64))["sequences"]
    assert out.shape == (MAX_SAMPLE_N,)


@REQUESTS
@given(z=st.lists(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32)),
                           min_size=4, max_size=4), max_size=4))
def test_decode_any_z(served, z):
    import tensorflow as tf

    out = served.signatures["decode"](z=tf.constant(np.array(z, np.float32).reshape(-1, 4)))
    assert out["sequences"].shape == (len(z),)
    _still_serves(served)


def test_complete_begins_every_row_with_its_prefix(served):
    """The graph's half of ``sample --scaffold``: each prefix written first, then completed from
    a prior z under the grammar mask; the same for a seed."""
    import tensorflow as tf

    def complete(prefixes, seed=4):
        out = served.signatures["complete"](prefixes=tf.constant(prefixes, tf.string),
                                            temperature=tf.constant(1.0),
                                            seed=tf.constant(seed, tf.int64))["sequences"]
        return [text.decode() for text in out.numpy()]

    prefixes = ["c1ccccc1", "", "CC(=O)", "c1ccccc1"]
    texts = complete(prefixes)
    assert texts == complete(prefixes)
    assert all(text.startswith(prefix) for text, prefix in zip(texts, prefixes))
    assert complete([]) == []
    with pytest.raises(tf.errors.InvalidArgumentError, match="complete: the model reads SMILES"):
        complete(["CCO", "Xx§"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="complete: the model reads at most"):
        complete(["C" * 200])
    _still_serves(served)


def test_an_export_cut_off_halfway_leaves_nothing_half_written(tmp_path):
    import dataclasses

    from conftest import file_size_limit

    from seqvae.errors import SeqvaeError

    config = tiny_config()
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, max_steps=2,
                                                                   epochs=5))
    run_dir = str(tmp_path / "run")
    train(config, run_dir, SMILES)
    out = tmp_path / "exported"
    with file_size_limit(4000), pytest.raises(SeqvaeError) as caught:
        export(run_dir, str(out))
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(f"cannot write the SavedModel {out} (")
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".export-")]
