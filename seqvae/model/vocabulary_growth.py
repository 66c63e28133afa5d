"""A trained model's weights carried over to a model of a larger vocabulary.

``seqvae finetune --extend-vocab`` appends the tokens a user's molecules need (``[N+]``,
``[C@@H]``, ``P``, a ring label ``6``) to a trained run's vocabulary. Every weight whose shape
depends on the vocabulary has the vocabulary along one axis, starting at index 0: the one-hot
(or embedding) rows of the encoder's and the decoder's first layer, and the output layer's
kernel columns and bias. A new token's slice starts as a copy of its *analog*'s (``[C@@H]`` and
``[CH2+]`` from ``C``, ``[O-]`` from ``O``, ``P`` from ``N``, ``I`` from ``Br``, ring label
``6`` from the largest label the run had), so the model reads and writes it as the atom it most
resembles from the first step on; its output bias starts ``NEW_TOKEN_BIAS`` lower, so the
trained tokens keep their probabilities until training teaches the new ones. Tokens with no
analog start from the mean of the trained tokens' slices.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from seqvae.data.vocabulary import SPECIAL_TOKENS
from seqvae.errors import SeqvaeError
from seqvae.model.smiles_tokens import RING_LABEL, atom_valence

NEW_TOKEN_BIAS = -2.0  # a new token's output bias against its analog's (e^-2: 7x less likely)
MEAN = -1  # ``analog_ids``: no analog, start from the mean of the trained tokens
_BRACKET_SYMBOL = re.compile(r"\[\d*([A-Z][a-z]?|[a-z][a-z]?|\*)")
# An element the run lacks starts from one it has in the same group (or carbon).
_GROUP_ANALOG = {"P": "N", "As": "N", "Sb": "N", "Se": "S", "Te": "S", "I": "Br", "Si": "C",
                 "Ge": "C", "Sn": "C", "B": "C", "Al": "C"}
_BOND_ANALOG = {"/": "-", "\\": "-", ":": "-", "$": "#"}  # else no analog: the mean


def analog_of(token: str, trained: Sequence[str]) -> str | None:
    """The trained token a new SMILES token starts from, or None (the mean of them all)."""
    if token in _BOND_ANALOG:
        return _BOND_ANALOG[token] if _BOND_ANALOG[token] in trained else None
    if RING_LABEL.fullmatch(token):
        labels = [t for t in trained if RING_LABEL.fullmatch(t)]
        return max(labels, key=lambda t: int(t.lstrip("%"))) if labels else None
    if atom_valence(token) is None:  # ".", or a token of no class: no analog
        return None
    match = _BRACKET_SYMBOL.match(token)
    symbol = match.group(1) if match else token
    for candidate in (symbol, symbol.capitalize(), _GROUP_ANALOG.get(symbol.capitalize()), "C"):
        if candidate and candidate != token and candidate in trained:
            return candidate
    return None


def analog_ids(old_tokens: Sequence[str], new_tokens: Sequence[str],
               smiles: bool = True) -> np.ndarray:
    """int ``(len(new_tokens) - len(old_tokens),)``: for each appended token the id of its
    analog among ``old_tokens`` (``MEAN`` for none; tokens of other notations always).

    Raises:
      SeqvaeError: ``new_tokens`` does not begin with ``old_tokens``.
    """
    if list(new_tokens[:len(old_tokens)]) != list(old_tokens):
        raise SeqvaeError("a grown vocabulary must keep the trained tokens first, in order")
    trained = list(old_tokens[len(SPECIAL_TOKENS):])
    ids = []
    for token in new_tokens[len(old_tokens):]:
        analog = analog_of(token, trained) if smiles else None
        ids.append(MEAN if analog is None else list(old_tokens).index(analog))
    return np.array(ids, np.int64)


def grow(value: np.ndarray, shape: tuple[int, ...], vocab_size: int, analogs: np.ndarray,
         bias_shift: float = 0.0) -> np.ndarray:
    """``value`` widened to ``shape`` along the one axis where they differ: the new slices go
    right after the old vocabulary's ``vocab_size`` (which starts at index 0 of that axis), each
    a copy of its analog's (``MEAN``: the mean of the trained tokens' slices) plus
    ``bias_shift``; what follows the vocabulary on that axis (z's and the grammar's rows of a
    first-layer kernel) keeps its values.

    Args:
      value: a trained weight, e.g. a decoder's first-layer kernel ``(V + L + F, 3H)``.
      shape: its shape in the grown model, e.g. ``(V' + L + F, 3H)``.
      vocab_size: V, the trained vocabulary's size (special tokens included).
      analogs: ``analog_ids``'s, ``V' - V`` of them.
      bias_shift: added to the new slices (the output bias: ``NEW_TOKEN_BIAS``).

    Raises:
      SeqvaeError: the shapes differ elsewhere, or by another count than ``len(analogs)``.
    """
    if tuple(value.shape) == tuple(shape):
        return value
    axes = [a for a, (old, new) in enumerate(zip(value.shape, shape)) if old != new]
    if (len(value.shape) != len(shape) or len(axes) != 1
            or shape[axes[0]] - value.shape[axes[0]] != len(analogs)):
        raise SeqvaeError(f"cannot grow a weight of shape {tuple(value.shape)} to {tuple(shape)} "
                          f"by {len(analogs)} tokens")
    moved = np.moveaxis(value, axes[0], 0)
    mean = moved[len(SPECIAL_TOKENS):vocab_size].mean(axis=0)
    new = np.stack([mean if a == MEAN else moved[a] for a in analogs]) + bias_shift
    grown = np.concatenate([moved[:vocab_size], new.astype(value.dtype), moved[vocab_size:]])
    return np.moveaxis(grown, 0, axes[0])


def weight_key(path: str) -> str:
    """A weight's path without its model's own (numbered) name: ``sequence_vae_1/decoder/
    logits/bias`` -> ``decoder/logits/bias``, so two models' weights can be matched."""
    first, _, rest = path.partition("/")
    return rest if rest and re.fullmatch(r"sequence_vae(_\d+)?", first) else path


def transfer(trained_weights: Sequence, weights: Sequence, vocab_size: int,
             analogs: np.ndarray, keep_missing: bool = False) -> int:
    """Sets ``weights`` (a grown model's, or one of the same vocabulary) from a trained model's
    ``trained_weights``, matched by path (``weight_key``), each grown with ``grow``; the output
    bias's new slices start ``NEW_TOKEN_BIAS`` lower. Weights the grown model lacks (a jointly
    trained property head) are left behind; with ``keep_missing``, weights the trained model
    lacks (a property head it never had) keep their values.

    Returns:
      How many weights were grown.

    Raises:
      SeqvaeError: a weight of the grown model has no trained counterpart (unless
        ``keep_missing``), or cannot be grown from it.
    """
    trained = {weight_key(w.path): w for w in trained_weights}
    grown = 0
    for weight in weights:
        source = trained.get(weight_key(weight.path))
        if source is None and keep_missing:
            continue
        if source is None:
            raise SeqvaeError(f"the trained model has no weight {weight.path!r}: the "
                              "architectures differ")
        value = np.asarray(source.numpy())
        shift = NEW_TOKEN_BIAS if weight_key(weight.path).endswith("logits/bias") else 0.0
        new = grow(value, tuple(weight.shape), vocab_size, analogs, shift)
        grown += new is not value
        weight.assign(new)
    return grown
