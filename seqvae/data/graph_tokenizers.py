"""Tokenization inside the TensorFlow graph (``tf.strings``): the same tokens as
``seqvae.data.tokenizers``, for streamed training data and for the exported SavedModel."""

from __future__ import annotations

import tensorflow as tf

from seqvae.data.tokenizers import SMILES_PATTERN
from seqvae.data.vocabulary import Vocabulary
from seqvae.errors import SeqvaeError

_SEPARATOR = "\x1f"  # never inside a token: marks token boundaries before tf.strings.split
_GRAPH_PATTERNS = {"smiles": SMILES_PATTERN + "|.", "selfies": r"\[[^\[\]]*\]|\.|."}


def graph_tokenize(sequences: tf.Tensor, tokenizer: str) -> tf.RaggedTensor:
    """Tokenizes a string tensor ``(N,)`` in the graph, like ``get_tokenizer(tokenizer)``."""
    if tokenizer == "char":
        return tf.strings.unicode_split(sequences, "UTF-8")
    if tokenizer == "word":
        return tf.strings.split(sequences)
    if tokenizer not in _GRAPH_PATTERNS:
        raise SeqvaeError(f"tokenizer {tokenizer!r} has no in-graph version")
    marked = tf.strings.regex_replace(sequences, _GRAPH_PATTERNS[tokenizer], _SEPARATOR + "\\0")
    pieces = tf.strings.split(marked, sep=_SEPARATOR)
    return tf.ragged.boolean_mask(pieces, tf.strings.length(pieces) > 0)


def lookup_table(vocab: Vocabulary) -> tf.lookup.StaticHashTable:
    """token -> id (``<unk>`` for unknown tokens)."""
    tokens = vocab.tokens
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(tokens), tf.range(len(tokens), dtype=tf.int64)),
        default_value=vocab.unk_id)
