"""Using a trained run: sample, encode, decode, reconstruct and interpolate.

Each function takes a ``seqvae.run.Run`` loaded with ``load_run`` and works in batches through
compiled ``tf.function`` s; texts come back in input order.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from seqvae import decoding, randomness
from seqvae.config import DataConfig
from seqvae.errors import SeqvaeError
from seqvae.run import Run
from seqvae.tokenizers import SelfiesTokenizer


def _compiled_decoder(run: Run, greedy: bool, temperature: float, top_k: int):
    model = run.model

    @tf.function(reduce_retracing=True)
    def decode(z, seed):
        return decoding.sample_from_z(model, z, run.max_len, greedy=greedy,
                                      temperature=temperature, top_k=top_k, seed=seed)

    return decode


def ids_to_texts(run: Run, ids: np.ndarray) -> list[str]:
    """Decoded id rows -> texts (SMILES for SMILES and SELFIES runs)."""
    texts = [run.tokenizer.detokenize(run.vocab.decode(row)) for row in np.asarray(ids)]
    if run.info["tokenizer"] == "selfies":
        texts = [_selfies_to_smiles(t) for t in texts]
    return texts


def _selfies_to_smiles(text: str) -> str:
    try:
        return SelfiesTokenizer.to_smiles(text)
    except SeqvaeError:
        return ""


def decode(run: Run, z: np.ndarray, greedy: bool = True, temperature: float = 1.0, top_k: int = 0,
           seed: int = 0, batch_size: int = 1000) -> list[str]:
    """Decodes latent vectors ``z (N, latent_dim)`` into texts."""
    z = np.asarray(z, np.float32)
    if z.ndim != 2 or z.shape[1] != run.config.model.latent_dim:
        raise SeqvaeError(f"z must have shape (N, {run.config.model.latent_dim}), got {z.shape}")
    step = _compiled_decoder(run, greedy, temperature, top_k)
    base = randomness.as_seed(seed)
    texts = []
    for i, start in enumerate(range(0, len(z), batch_size)):
        ids = step(tf.constant(z[start:start + batch_size]), randomness.fold_in(base, i))
        texts.extend(ids_to_texts(run, ids.numpy()))
    return texts


def sample(run: Run, num: int, temperature: float = 1.0, top_k: int = 0, greedy: bool = False,
           seed: int = 0, batch_size: int = 1000) -> list[str]:
    """Draws ``num`` texts from the prior ``z ~ N(0, I)``; the same seed gives the same texts."""
    z = randomness.normal([num, run.config.model.latent_dim], randomness.fold_in(randomness.as_seed(seed), 7))
    return decode(run, z.numpy(), greedy=greedy, temperature=temperature, top_k=top_k, seed=seed,
                  batch_size=batch_size)


def encode_ids(run: Run, data, strict: bool = False):
    """Reads ``data`` and encodes it with the run's vocabulary and maximum length."""
    from seqvae.train import prepare_data

    config = DataConfig(tokenizer=run.info["tokenizer"], column=run.config.data.column,
                        max_len=run.max_len, validation_fraction=0.0)
    return prepare_data(config, data, vocab=run.vocab, max_len=run.max_len, strict=strict,
                        tokenizer=run.info["tokenizer"])


def encode(run: Run, data, strict: bool = False, batch_size: int = 1000):
    """Encodes sequences -> ``(z_mean, z_log_var)``, float32 ``(N, latent_dim)`` in input order."""
    prepared = encode_ids(run, data, strict)
    encoder = tf.function(lambda ids: run.model.encoder(ids, training=False), reduce_retracing=True)
    means, log_vars = [], []
    for start in range(0, len(prepared.ids), batch_size):
        mean, log_var = encoder(tf.constant(prepared.ids[start:start + batch_size]))
        means.append(mean.numpy())
        log_vars.append(log_var.numpy())
    return np.concatenate(means).astype(np.float32), np.concatenate(log_vars).astype(np.float32)


def reconstruct(run: Run, data, num_samples: int = 10, seed: int = 0, strict: bool = False,
                batch_size: int = 1000) -> dict:
    """Reconstruction accuracy, decoding greedily (free-running, not teacher-forced).

    ``token_accuracy``: fraction of real positions (tokens and ``<eos>``) where the decoded id
    equals the input id; ``sequence_accuracy``: fraction of sequences decoded exactly. Reported
    from ``z = mean`` and averaged over ``num_samples`` draws ``z ~ q(z|x)``.
    """
    prepared = encode_ids(run, data, strict)
    mean, log_var = encode(run, data, strict, batch_size)
    ids, mask = prepared.ids, prepared.ids != 0
    step = _compiled_decoder(run, True, 1.0, 0)

    def accuracy(z):
        decoded = np.concatenate([step(tf.constant(z[s:s + batch_size]), tf.constant([0, 0])).numpy()
                                  for s in range(0, len(z), batch_size)])
        same = (decoded == ids) | ~mask
        return float((same & mask).sum() / mask.sum()), float(same.all(axis=1).mean())

    token_mean, seq_mean = accuracy(mean)
    sampled = []
    for i in range(num_samples):
        eps = randomness.normal(mean.shape, randomness.fold_in(randomness.as_seed(seed), i)).numpy()
        sampled.append(accuracy(mean + np.exp(0.5 * log_var) * eps))
    return {"sequences": len(ids), "token_accuracy_mean_z": token_mean,
            "sequence_accuracy_mean_z": seq_mean, "samples_per_sequence": num_samples,
            "token_accuracy_sampled_z": float(np.mean([a for a, _ in sampled])) if sampled else None,
            "sequence_accuracy_sampled_z": float(np.mean([b for _, b in sampled])) if sampled else None}


def interpolate(run: Run, start: str, end: str, steps: int = 10, slerp: bool = False) -> list[tuple[float, str]]:
    """Decodes ``steps`` points on the path between the encodings (means) of two sequences."""
    if steps < 2:
        raise SeqvaeError("--steps must be at least 2")
    mean, _ = encode(run, [start, end], strict=True)
    a, b = mean[0], mean[1]
    ts = np.linspace(0.0, 1.0, steps)
    if slerp:
        cos = np.dot(a, b) / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12)
        omega = np.arccos(np.clip(cos, -1.0, 1.0))
        if omega < 1e-6:
            points = [(1 - t) * a + t * b for t in ts]
        else:
            points = [(np.sin((1 - t) * omega) * a + np.sin(t * omega) * b) / np.sin(omega) for t in ts]
    else:
        points = [(1 - t) * a + t * b for t in ts]
    return list(zip(ts.tolist(), decode(run, np.stack(points))))
