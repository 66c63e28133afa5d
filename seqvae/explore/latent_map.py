"""The explorer's map: molecules, their latent means, 2-D coordinates and properties, built once
per (molecules, checkpoint, projection) and cached in ``RUN_DIR/explore/``."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from dataclasses import dataclass
from typing import Callable

import numpy as np

from seqvae import inference
from seqvae.errors import SeqvaeError
from seqvae.explore import molecules, projection
from seqvae.files import atomic_path
from seqvae.run import Run, checkpoint_dir
from seqvae.messages import note

# Colour choices every map has, as (key, label); ``properties`` holds one array per key.
COLOURS = tuple((key, label) for key, label, _ in molecules.PROPERTIES) + (("length", "length (tokens)"),)


@dataclass
class LatentMap:
    """Attributes:
        smiles: N molecules, as read (those the run can encode, in input order).
        z: float32 ``(N, latent_dim)`` their encodings (means of q(z|x)).
        coords: float32 ``(N, 2)`` their map positions.
        properties: float32 ``(N,)`` per key of ``COLOURS``; NaN where not defined.
        projection: the fitted projection that places new points on the map.
        source: where the molecules came from.
    """

    smiles: list[str]
    z: np.ndarray
    coords: np.ndarray
    properties: dict[str, np.ndarray]
    projection: object
    source: str

    def __len__(self) -> int:
        return len(self.smiles)


def _stderr(line: str) -> None:
    note(f"seqvae explore: {line}")


def cache_key(run: Run, source: str, n: int, method: str) -> str:
    """Names a map by what it depends on: the molecules (path, size, modification time), their
    number, the run's latest checkpoint and the projection method."""
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(checkpoint_dir(run.run_dir)) or ""
    described = {"source": str(source), "n": n, "method": method,
                 "checkpoint": os.path.basename(latest)}
    if isinstance(source, str) and os.path.exists(source):
        stat = os.stat(source)
        described.update(source=os.path.abspath(source), size=stat.st_size, mtime=stat.st_mtime_ns)
    return hashlib.sha1(json.dumps(described, sort_keys=True).encode()).hexdigest()[:12]


def build_map(run: Run, source="moses:test", n: int = 5000, method: str = "pca",
              progress: Callable[[str], None] | None = _stderr, use_cache: bool = True) -> LatentMap:
    """Reads up to ``n`` molecules from ``source`` (a file or ``moses:SPLIT``), encodes them,
    computes their properties and projects them; the result is cached in ``RUN_DIR/explore/``
    (a run directory that cannot be written is used without the cache, with a note).
    """
    if n < 2:
        raise SeqvaeError(f"the map needs at least 2 molecules (n), got {n}")
    if method not in projection.METHODS:
        raise SeqvaeError(f"unknown projection {method!r}; choose one of {', '.join(projection.METHODS)}")
    if method == "umap":
        projection.require_umap()
    progress = progress or (lambda line: None)
    folder = run.output_dir("explore")  # the user's cache for a shipped model (read-only)
    key = cache_key(run, source, n, method)
    map_path = os.path.join(folder, f"map-{key}.npz")
    projection_path = projection.projection_file(folder, key, method)
    if use_cache and os.path.exists(map_path) and os.path.exists(projection_path):
        try:
            latent_map = _load(map_path, projection_path, method, str(source))
            progress(f"map of {len(latent_map)} molecules from the cache {map_path}")
            return latent_map
        except (OSError, ValueError, KeyError, EOFError, pickle.UnpicklingError) as error:
            progress(f"ignoring the unreadable cache {map_path} ({error}); rebuilding it")

    encoded = inference.encode_ids(run, source, skip=True, limit=n)
    ids, texts = encoded.ids, list(encoded.texts)
    if encoded.problems:
        progress(f"left out {len(encoded.problems)} of the first {n} molecules that this run "
                 f"cannot encode (first: {encoded.messages[0]})")
    if len(texts) < 2:
        raise SeqvaeError(f"{source}: the map needs at least 2 molecules this run can encode, "
                          f"got {len(texts)}")
    progress(f"encoding {len(texts)} molecules")
    z, _ = inference.encode_batches(run, ids)
    progress(f"computing logP, QED and SA of {len(texts)} molecules")
    values = molecules.properties(texts) if run.codec.molecules else {}
    values["length"] = (encoded.lengths - 1).astype(np.float32)  # without <eos>
    progress(f"fitting the {method.upper()} projection")
    fitted = projection.fit_projection(method, z)
    latent_map = LatentMap(texts, z, fitted.transform(z), values, fitted, str(source))
    if use_cache:
        _save(latent_map, folder, map_path, projection_path, progress)
    return latent_map


def _save(latent_map: LatentMap, folder: str, map_path: str, projection_path: str,
          progress: Callable[[str], None]) -> None:
    try:
        os.makedirs(folder, exist_ok=True)
        latent_map.projection.save(projection_path)
        with atomic_path(map_path, suffix=".npz") as tmp:
            np.savez(tmp, smiles=np.array(latent_map.smiles, dtype=str), z=latent_map.z,
                     coords=latent_map.coords,
                     **{f"property_{key}": value for key, value in latent_map.properties.items()})
        progress(f"cached the map in {map_path}")
    except OSError as error:
        progress(f"cannot cache the map in {folder} ({error.strerror}); it is rebuilt next time")


def _load(map_path: str, projection_path: str, method: str, source: str) -> LatentMap:
    with np.load(map_path, allow_pickle=False) as stored:
        values = {name[len("property_"):]: stored[name] for name in stored.files
                  if name.startswith("property_")}
        return LatentMap([str(s) for s in stored["smiles"]], stored["z"], stored["coords"], values,
                         projection.load_projection(projection_path, method), source)
