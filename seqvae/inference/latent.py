"""Moving in z: reconstruction accuracy, interpolation between sequences, latent paths."""

from __future__ import annotations

from collections import Counter

import numpy as np
import tensorflow as tf

from seqvae.data.preparation import ids_to_texts
from seqvae.data.vocabulary import PAD_ID
from seqvae.errors import SeqvaeError
from seqvae.inference import compiled as compiled_lib
from seqvae.inference.encoding import encode, encode_batches, encode_ids
from seqvae.inference.texts import decode
from seqvae.model import randomness
from seqvae.run import Run
from seqvae.messages import note


def reconstruct(run: Run, data, num_samples: int = 10, seed: int = 0, strict: bool = False,
                batch_size: int = 1000, grammar: bool = True, beam_width: int = 0) -> dict:
    """Reconstruction accuracy, decoding greedily (free-running, not teacher-forced).

    ``token_accuracy``: fraction of real positions (tokens and ``<eos>``) where the decoded id
    equals the input id; ``sequence_accuracy``: fraction of sequences decoded exactly. Reported
    from ``z = mean`` and averaged over ``num_samples`` draws ``z ~ q(z|x)``; ``beam_width`` > 1
    decodes by beam search instead of greedily.
    """
    encoded = encode_ids(run, data, strict, skip=not strict)
    if encoded.problems:  # a measure over a data set: what the run cannot write is left out
        kinds = Counter(kind for _, kind, _ in encoded.problems)
        note(f"seqvae: reconstruction leaves out {len(encoded.problems)} sequences the run "
              f"cannot encode ({', '.join(f'{n} {kind}' for kind, n in kinds.items())}; first: "
              f"{encoded.messages[0]}); --strict stops at the first")
    ids = encoded.ids
    mean, log_var = encode_batches(run, ids, batch_size)
    mask = ids != PAD_ID
    decode_ids = compiled_lib.compiled_decoder(run, grammar=grammar, beam_width=beam_width)

    def decoded(z):
        return np.concatenate([decode_ids(tf.constant(z[s:s + batch_size]), tf.constant([0, 0])).numpy()
                               for s in range(0, len(z), batch_size)])

    def accuracy(z, out=None):
        out = decoded(z) if out is None else out
        same = (out == ids) | ~mask
        return float((same & mask).sum() / mask.sum()), float(same.all(axis=1).mean())

    from_mean = decoded(mean)
    token_mean, seq_mean = accuracy(mean, from_mean)
    exact = same_texts(run, ids_to_texts(run.codec, ids), ids_to_texts(run.codec, from_mean))
    sampled = []
    for i in range(num_samples):
        eps = randomness.normal(mean.shape, randomness.fold_in(randomness.as_seed(seed), i)).numpy()
        sampled.append(accuracy(randomness.reparametrize(mean, log_var, eps)))
    return {"sequences": len(ids), "left_out": len(encoded.problems),
            "decoding": f"beam {beam_width}" if beam_width > 1 else "greedy",
            "exact_match_mean_z": float(np.mean(exact)),
            "token_accuracy_mean_z": token_mean,
            "sequence_accuracy_mean_z": seq_mean, "samples_per_sequence": num_samples,
            "token_accuracy_sampled_z": float(np.mean([a for a, _ in sampled])) if sampled else None,
            "sequence_accuracy_sampled_z": float(np.mean([b for _, b in sampled])) if sampled else None}


def same_texts(run: Run, inputs: list[str], outputs: list[str]) -> np.ndarray:
    """bool ``(N,)``: output i is input i, as canonical SMILES for molecule runs (another
    spelling of the same molecule counts), as text otherwise."""
    if not run.codec.molecules:
        return np.array([a == b for a, b in zip(inputs, outputs)], bool)
    from rdkit import rdBase

    from seqvae.data.chemistry import canonical_smiles

    with rdBase.BlockLogs():
        return np.array([canonical_smiles(b) is not None and canonical_smiles(a) == canonical_smiles(b)
                         for a, b in zip(inputs, outputs)], bool)


def interpolate(run: Run, start: str, end: str, steps: int = 10, slerp: bool = False,
                grammar: bool = True, beam_width: int = 0) -> list[tuple[float, str]]:
    """Decodes ``steps`` points on the path between the encodings (means) of two sequences."""
    return interpolate_pairs(run, [(start, end)], steps, slerp, grammar, beam_width)[0]


def interpolate_pairs(run: Run, pairs: list[tuple[str, str]], steps: int = 10,
                      slerp: bool = False, grammar: bool = True,
                      beam_width: int = 0) -> list[list[tuple[float, str]]]:
    """``interpolate`` for many pairs in one decoding: a path of ``(t, text)`` per pair."""
    if steps < 2:
        raise SeqvaeError(f"an interpolation needs at least 2 steps, got {steps}")
    mean, _ = encode(run, [text for pair in pairs for text in pair], strict=True)
    ts = np.linspace(0.0, 1.0, steps)
    points = np.concatenate([latent_path(mean[2 * i], mean[2 * i + 1], ts, slerp)
                             for i in range(len(pairs))])
    texts = decode(run, points, grammar=grammar, beam_width=beam_width)
    return [list(zip(ts.tolist(), texts[i * steps:(i + 1) * steps])) for i in range(len(pairs))]


def latent_path(a: np.ndarray, b: np.ndarray, ts: np.ndarray, slerp: bool) -> np.ndarray:
    """Points ``(len(ts), L)`` from a to b: linear, or spherical (slerp)."""
    if slerp:
        cos = np.dot(a, b) / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12)
        omega = np.arccos(np.clip(cos, -1.0, 1.0))
        if omega >= 1e-6:
            return np.stack([(np.sin((1 - t) * omega) * a + np.sin(t * omega) * b) / np.sin(omega)
                             for t in ts])
    return np.stack([(1 - t) * a + t * b for t in ts])
