"""Reconstruction: does decoding z ~ q(z|x) give x back? The protocol of Kusner et al. 2017."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from seqvae import inference
from seqvae.data import chemistry
from seqvae.data.preparation import ids_to_texts
from seqvae.errors import SeqvaeError
from seqvae.evaluation.vae_quality import standard_error
from seqvae.model import randomness
from seqvae.run import Run


def reconstruction_protocol(run: Run, data, *, n_molecules: int = 1000, n_encodings: int = 10,
                            n_decodings: int = 10, seed: int = 0, grammar: bool = True) -> dict:
    """Reconstruction as measured by Kusner et al. 2017 (grammar VAE), plus greedy accuracy.

    Each of the first ``n_molecules`` sequences is encoded ``n_encodings`` times
    (``z ~ q(z|x)``) and each z decoded ``n_decodings`` times by sampling at temperature 1.
    ``reconstruction`` is the fraction of all these decodings equal to the input: same canonical
    SMILES for SMILES and SELFIES runs, same text otherwise; ``reconstruction_se`` is its
    standard error over molecules (the decodings of one molecule are correlated).
    ``reconstructed_at_least_once`` is the fraction of inputs that came back in any decoding,
    ``valid_decodings`` the fraction of decodings that are valid molecules (molecule runs only).
    ``exact_match_mean_z``, ``token_accuracy_mean_z`` and ``sequence_accuracy_mean_z`` are
    ``inference.reconstruct``'s greedy decoding from the mean.

    Args:
      run: a loaded run.
      data: sequences: a path, ``moses:SPLIT`` or a list of strings.
      n_molecules, n_encodings, n_decodings: the protocol's sizes (Kusner et al.: 10 x 10).
      seed: seeds the encodings and the decodings.
      grammar: decode SMILES runs under the grammar mask.

    Returns:
      The dict described above, with the sizes used.
    """
    if min(n_molecules, n_encodings, n_decodings) < 1:
        raise SeqvaeError("n_molecules, n_encodings and n_decodings must be at least 1")
    if isinstance(data, (list, tuple)):
        data = list(data[:n_molecules])  # do not tokenize what is not used
    encoded = inference.encode_ids(run, data)
    ids, texts = encoded.ids[:n_molecules], encoded.texts[:n_molecules]
    count = len(ids)
    mean, log_var = inference.encode_batches(run, ids)
    base = randomness.as_seed(seed)
    encodings = [randomness.reparametrize(mean, log_var, randomness.normal(
        mean.shape, randomness.fold_in(base, e)).numpy()) for e in range(n_encodings)]
    z = np.tile(np.concatenate(encodings), (n_decodings, 1))  # row (d * E + e) * N + i
    decoded = inference.decode(run, z, greedy=False, seed=seed, grammar=grammar)

    molecules = run.codec.molecules
    inputs = ids_to_texts(run.codec, ids)  # SMILES for SELFIES runs too
    if molecules:
        canonical = _canonicalizer()
        targets = [canonical(text) or text for text in inputs]
        outputs = [canonical(text) for text in decoded]
    else:
        targets, outputs = inputs, decoded
    same = np.array([out == targets[row % count] for row, out in enumerate(outputs)])
    same = same.reshape(n_decodings * n_encodings, count)
    greedy = inference.reconstruct(run, texts, num_samples=0, grammar=grammar)
    return {
        "molecules": count,
        "encodings_per_molecule": n_encodings,
        "decodings_per_encoding": n_decodings,
        "reconstruction": float(same.mean()),
        "reconstruction_se": standard_error(same.mean(axis=0)),
        "reconstructed_at_least_once": float(same.any(axis=0).mean()),
        "valid_decodings": float(np.mean([o is not None for o in outputs])) if molecules else None,
        "exact_match_mean_z": greedy["exact_match_mean_z"],
        "token_accuracy_mean_z": greedy["token_accuracy_mean_z"],
        "sequence_accuracy_mean_z": greedy["sequence_accuracy_mean_z"],
    }


def interpolation_protocol(run: Run, data, *, n_pairs: int = 100, steps: int = 8, seed: int = 0,
                           grammar: bool = True) -> dict:
    """Linear interpolation between the means of random pairs of held-out sequences.

    ``n_pairs`` pairs of distinct sequences drawn (seeded) from ``data``, ``steps`` points each
    (the two ends included). ``valid_intermediates``: fraction of the ``steps - 2`` inner points
    per pair that decode to valid molecules (every text counts for other runs);
    ``distinct_per_path``: mean number of different valid inner molecules per path;
    ``ends_reconstructed``: fraction of ends that decode to their own sequence.
    """
    if n_pairs < 1 or steps < 3:
        raise SeqvaeError("interpolation needs n_pairs >= 1 and steps >= 3")
    texts = inference.encode_ids(run, data).texts
    if len(texts) < 2:
        raise SeqvaeError("interpolation needs at least two held-out sequences")
    rng = np.random.default_rng(seed)
    pairs = [tuple(texts[i] for i in rng.choice(len(texts), 2, replace=False))
             for _ in range(n_pairs)]
    counts = path_counts(run, pairs, inference.interpolate_pairs(run, pairs, steps,
                                                                 grammar=grammar))
    return {
        "pairs": n_pairs, "steps": steps,
        "valid_intermediates": counts["valid"] / counts["inner"],
        "distinct_per_path": counts["distinct"] / n_pairs,
        "ends_reconstructed": counts["ends_back"] / (2 * n_pairs),
    }


def path_counts(run: Run, pairs: list[tuple[str, str]], paths: list[list[tuple[float, str]]]
                ) -> dict[str, int]:
    """Counts over interpolation paths (``inference.interpolate_pairs``) between ``pairs``:
    ``inner`` points (ends excluded), how many are ``valid`` (molecule runs; every text counts
    for others), the sum over paths of ``distinct`` valid inner molecules, and ``ends_back``:
    ends that decode to their own sequence."""
    canonical = _canonicalizer() if run.codec.molecules else (lambda text: text)
    inner = [[canonical(text) for _, text in path[1:-1]] for path in paths]
    ends = [text for path in paths for text in (path[0][1], path[-1][1])]
    wanted = [text for pair in pairs for text in pair]
    return {"inner": sum(map(len, inner)),
            "valid": sum(c is not None for path in inner for c in path),
            "distinct": sum(len({c for c in path if c is not None}) for path in inner),
            "ends_back": int(inference.same_texts(run, wanted, ends).sum())}


def _canonicalizer() -> Callable[[str], str | None]:
    """``chemistry.canonical_smiles`` with a cache (decodings repeat) and RDKit's logs silenced."""
    from rdkit import rdBase

    cache: dict[str, str | None] = {}

    def canonical(text: str) -> str | None:
        if text not in cache:
            with rdBase.BlockLogs():
                cache[text] = chemistry.canonical_smiles(text)
        return cache[text]

    return canonical
