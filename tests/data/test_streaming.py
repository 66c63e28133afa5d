"""Streaming text shards: in-graph tokenization, one-pass vocabulary, exact resume."""

import dataclasses
import gzip
import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import SMILES, tiny_config

from seqvae.data import streaming
from seqvae.data.tokenizers import SmilesTokenizer, get_tokenizer
from seqvae.data.vocabulary import Vocabulary
from seqvae.errors import SeqvaeError
from seqvae.files import read_jsonl
from seqvae.workflows import train  # training, then its aggregate prior
from seqvae.run import load_run


@pytest.mark.parametrize("name", ["smiles", "char", "word", "selfies"])
def test_graph_tokenize_matches_the_python_tokenizers(name):
    texts = {"smiles": ["CC(=O)Nc1ccc(O)cc1", "C[C@@H](Cl)Br", "c1cc[nH]c1%10", "CC.Na+"],
             "char": ["CCO", "héllo wörld"], "word": ["a  b c", "MKV LLA"],
             "selfies": ["[C][C][O]", "[C][=C][Branch1][C][O].[Na+]"]}[name]
    graph = streaming.graph_tokenize(tf.constant(texts), name).to_list()
    assert [[t.decode() for t in row] for row in graph] == [get_tokenizer(name).tokenize(t) for t in texts]


def test_graph_tokenize_matches_on_moses_lines():
    from seqvae.data.sources import read_sequences

    texts = read_sequences("moses:test", limit=2000).texts
    graph = streaming.graph_tokenize(tf.constant(texts), "smiles").to_list()
    tok = SmilesTokenizer()
    assert [[t.decode() for t in row] for row in graph] == [tok.tokenize(t) for t in texts]


def _shards(folder, lines, parts=2):
    paths = []
    for i in range(parts):
        path = folder / f"part{i}.smi.gz"
        with gzip.open(path, "wt") as out:
            out.write("# header comment\n" + "\n".join(lines[i::parts]) + "\n")
        paths.append(path)
    return str(folder / "part*.smi.gz")


def test_scan_corpus_fits_the_same_vocabulary_as_in_memory(tmp_path):
    pattern = _shards(tmp_path, SMILES)
    scan = streaming.scan_corpus(streaming.expand_sources(pattern), "smiles")
    tok = SmilesTokenizer()
    assert scan["vocab"] == Vocabulary.fit(tok.tokenize(s) for s in SMILES)
    assert scan["lines"] == len(SMILES)
    assert scan["max_len"] == max(len(tok.tokenize(s)) for s in SMILES) + 1


def test_expand_sources_errors(tmp_path):
    with pytest.raises(SeqvaeError, match="no file matches"):
        streaming.expand_sources(str(tmp_path / "none*.smi"))
    (tmp_path / "t.csv").write_text("SMILES\nCCO\n")
    with pytest.raises(SeqvaeError, match="streaming reads text files"):
        streaming.expand_sources(str(tmp_path / "t.csv"))


def test_batches_cover_every_training_line_once_and_split_by_hash(tmp_path):
    lines = [f"C{'C' * (i % 9)}O{i % 7}" for i in range(300)]  # distinct strings
    pattern = _shards(tmp_path, lines, parts=3)
    files = streaming.expand_sources(pattern)
    scan = streaming.scan_corpus(files, "smiles")
    data = streaming.StreamingData(files, scan["vocab"], "smiles", scan["max_len"], scan["lines"],
                                   batch_size=16, seed=1, validation_fraction=0.2)
    tok = SmilesTokenizer()
    decode = lambda row: "".join(scan["vocab"].decode(row))  # noqa: E731
    seen = [decode(r) for b in data.batches(0) for r in b.numpy()]
    held = [decode(r) for b in data.batches(0, validation=True) for r in b.numpy()]
    expected_held = [t for t in lines if streaming.is_validation(t, 0.2)]
    assert sorted(held) == sorted(expected_held)
    assert sorted(seen) == sorted(t for t in lines if t not in set(expected_held))
    again = [decode(r) for b in data.batches(0) for r in b.numpy()]
    other = [decode(r) for b in data.batches(1) for r in b.numpy()]
    assert again == seen and other != seen  # order: a function of (seed, epoch)
    skipped = [decode(r) for b in data.batches(0, skip=2) for r in b.numpy()]
    first_two = sum(len(b.numpy()) for b in list(data.batches(0))[:2])
    assert skipped == seen[first_two:]
    assert all(len(tok.tokenize(t)) + 1 <= scan["max_len"] for t in seen)
    # the aggregate prior's draw: the first rows of epoch 0's shuffle, before bucketing, padded
    firsts = data.shuffled_sequences(7)
    assert firsts.shape == (7, scan["max_len"]) and firsts.dtype == np.int32
    assert sorted(decode(r) for r in data.shuffled_sequences(10_000)) == sorted(seen)
    np.testing.assert_array_equal(firsts, data.shuffled_sequences(7))


@pytest.mark.slow
def test_streamed_training_resumes_exactly(tmp_path):
    pattern = _shards(tmp_path, SMILES * 3)
    config = tiny_config()
    config = dataclasses.replace(
        config, data=dataclasses.replace(config.data, streaming=True),
        model=dataclasses.replace(config.model, prior="aggregate", prior_encodings=10),
        train=dataclasses.replace(config.train, epochs=2, checkpoint_every=3))
    straight, broken = str(tmp_path / "straight"), str(tmp_path / "broken")
    summary = train(config, straight, pattern)
    assert summary["steps"] > 6 and summary["padding_fraction"] is not None
    train(dataclasses.replace(config, train=dataclasses.replace(config.train, max_steps=5)),
          broken, pattern)
    summary2 = train(config, broken, None, resume=True)  # the run remembers its files
    assert summary2["steps"] == summary["steps"]
    for a, b in zip(load_run(straight).model.weights, load_run(broken).model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    epochs = [r for r in read_jsonl(os.path.join(straight, "metrics.jsonl")) if r["kind"] == "epoch"]
    assert len(epochs) == 2 and all(np.isfinite(r["val_loss"]) for r in epochs)
    from seqvae import latent_prior  # the aggregate prior of 10 streamed training sequences

    assert latent_prior.load(straight).sequences == 10
