"""What the explorer's page asks of the model, without the page: select a molecule and decode
its neighbours, interpolate, sample (also under conditions and a scaffold), optimise. Each
request runs one compiled, batched decode; the functions are traced once at start-up
(``warm_up``), so requests never wait on tracing (a conditioned sample, a search of several
decodes, traces its prefixed decoder on its first request).

Results are plain dicts and lists (JSON for the page's stores); a molecule as shown is an entry
``{"smiles", "valid", "similarity", "x", "y"}`` (similarity: Tanimoto to the request's reference
molecule, None when either is invalid; x, y: its place on the map).
"""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np
import tensorflow as tf

from seqvae import inference
from seqvae.data.preparation import encode_texts, ids_to_texts
from seqvae.errors import SeqvaeError
from seqvae.model.decoding import check_sampling
from seqvae.explore import molecules
from seqvae.explore.latent_map import LatentMap
from seqvae.explore.property_head import PropertyHead, default_objective
from seqvae.run import Run

MAX_TYPED = 300  # characters in a typed SMILES
LIMITS = {"count": (1, 64), "steps": (2, 30), "samples": (1, 64), "optimise_steps": (1, 100)}
WHERE_SECONDS = 20.0  # a conditioned sample's search stops here: the page answers in time


class Explorer:
    """A loaded run, its map and its compiled encoder and decoders.

    Args:
        run: from ``load_run``.
        latent_map: from ``build_map``.
        property_head: from ``find_property_head`` (None: no prediction, no optimisation).
        beam_width: hypotheses of the "beam" decoding choice.
    """

    def __init__(self, run: Run, latent_map: LatentMap, property_head: PropertyHead | None = None,
                 beam_width: int = 5):
        self.run, self.map, self.head = run, latent_map, property_head
        self.beam_width = beam_width
        self.latent_dim = run.config.model.latent_dim
        self._encoder = inference.compiled_encoder(run)
        self._greedy = inference.compiled_decoder(run)
        self._beam = inference.compiled_decoder(run, beam_width=beam_width)
        self._sampler = inference.compiled_decoder(run, greedy=False)
        self._beam_ready = threading.Event()  # cleared while warm_up traces beam search
        self._beam_ready.set()
        if property_head is not None:
            latent_map.properties.update(self.predicted(latent_map.z))

    # --- start-up ----------------------------------------------------------------------------

    def warm_up(self, background_beam: bool = True,
                on_beam_ready: Callable[[], None] | None = None) -> None:
        """Traces the encoder and the decoders once each for any batch size (a ``None`` batch
        dimension, which every later call matches); beam search, the slowest to trace, in a
        background thread when ``background_beam`` (a beam request waits for it), calling
        ``on_beam_ready`` when done."""
        z_spec = tf.TensorSpec([None, self.latent_dim], tf.float32)
        seed_spec = tf.TensorSpec([2], tf.int32)
        self._encoder.get_concrete_function(tf.TensorSpec([None, self.run.max_len], tf.int32))
        self._greedy.get_concrete_function(z_spec, seed_spec)
        self._sampler.get_concrete_function(z_spec, seed_spec, tf.TensorSpec([], tf.float32))
        zeros = np.zeros((1, self.latent_dim), np.float32)
        self.decode(zeros)  # the first run of a graph is slow too
        self._sampler(tf.constant(zeros), tf.constant([0, 0]), tf.constant(1.0))
        if inference.rejection_rounds(self.run):  # what sampling by rejection runs
            inference.trace_rejection_sampler(self.run)
            inference.rejection_sample(self.run, zeros, 1)  # a graph's first run is slow too
        if self.head is not None:
            self.head.optimise(zeros[0], self.head.names[0], 1)  # traces its gradient

        def trace_beam():
            try:
                self._beam.get_concrete_function(z_spec, seed_spec)
                self._beam(tf.zeros((1, self.latent_dim)), tf.constant([0, 0]))
            finally:
                self._beam_ready.set()
            if on_beam_ready is not None:
                on_beam_ready()

        if background_beam:
            self._beam_ready.clear()
            threading.Thread(target=trace_beam, daemon=True, name="trace-beam").start()
        else:
            trace_beam()

    # --- the model -----------------------------------------------------------------------------

    def decode(self, z: np.ndarray, beam: bool = False) -> list[str]:
        """Texts of ``z (N, latent_dim)``, greedy or by beam search, in one compiled call."""
        if beam:
            self._beam_ready.wait()  # while start-up still traces it, rather than tracing twice
        decode_ids = self._beam if beam else self._greedy
        ids = decode_ids(tf.constant(np.asarray(z, np.float32)), tf.constant([0, 0]))
        return ids_to_texts(self.run.codec, ids.numpy())

    def encode_smiles(self, text: str) -> np.ndarray:
        """The encoding (mean) of a typed SMILES, ``(latent_dim,)``.

        Raises:
            SeqvaeError: a message for the page when the text is empty, not a molecule, or holds
                tokens this run does not know or too many of them.
        """
        text = (text or "").strip()
        if not text:
            raise SeqvaeError("type a SMILES first")
        if len(text) > MAX_TYPED:
            raise SeqvaeError(f"that SMILES is longer than {MAX_TYPED} characters")
        try:
            encoded = encode_texts(self.run.codec, [text], on_error="raise", source="typed")
        except SeqvaeError as error:
            problem = str(error).split(": ", 1)[-1]
            raise SeqvaeError(f"cannot use {text!r}: {problem}") from None
        mean, _ = self._encoder(tf.constant(encoded.ids))
        return mean.numpy()[0]

    def entries(self, texts: list[str], z: np.ndarray, reference: str | None) -> list[dict]:
        """Molecules as shown: validity, similarity to ``reference`` and map place of each."""
        coords = self.map.projection.transform(z)
        similar = (molecules.similarities(reference, texts) if reference is not None
                   else [None] * len(texts))
        return [{"smiles": text, "valid": molecules.is_valid(text), "similarity": sim,
                 "x": float(x), "y": float(y)}
                for text, sim, (x, y) in zip(texts, similar, coords)]

    # --- requests ----------------------------------------------------------------------------

    def select(self, index: int | None = None, smiles: str | None = None, radius: float = 0.5,
               count: int = 12, beam: bool = False, seed: int = 0) -> dict:
        """A map point (``index``) or a typed SMILES, its reconstruction and ``count``
        neighbours decoded from ``z + radius * eps``, ``eps ~ N(0, I)`` (seeded), in one decode.

        Returns:
            ``{"smiles", "index", "z", "x", "y", "properties", "reconstruction": entry,
            "neighbours": [entry], "radius", "decoding"}``.
        """
        count = _clamp(count, "count")
        if index is not None:
            if not 0 <= index < len(self.map):
                raise SeqvaeError(f"no map point {index}")
            smiles, z = self.map.smiles[index], self.map.z[index]
        else:
            z = self.encode_smiles(smiles)
            smiles = smiles.strip()
        radius = max(0.0, float(radius))
        eps = np.random.default_rng(seed).standard_normal((count, self.latent_dim))
        points = np.concatenate([z[None], z[None] + radius * eps]).astype(np.float32)
        texts = self.decode(points, beam)
        shown = self.entries(texts, points, smiles)
        (x, y), = self.map.projection.transform(z[None])
        values = self._properties(smiles, z, index)
        return {"smiles": smiles, "index": index, "z": z.tolist(), "x": float(x), "y": float(y),
                "properties": values, "reconstruction": shown[0], "neighbours": shown[1:],
                "radius": radius, "decoding": self.decoding_name(beam)}

    def interpolate(self, start: str, end: str, steps: int = 8, slerp: bool = False,
                    beam: bool = False) -> dict:
        """``steps`` molecules decoded on the line (or great circle) between two typed SMILES.

        Returns:
            ``{"start", "end", "path": [entry + "t"], "slerp", "decoding"}``; similarity to start.
        """
        steps = _clamp(steps, "steps")
        try:
            a = self.encode_smiles(start)
        except SeqvaeError as error:
            raise SeqvaeError(f"A: {error}") from None
        try:
            b = self.encode_smiles(end)
        except SeqvaeError as error:
            raise SeqvaeError(f"B: {error}") from None
        ts = np.linspace(0.0, 1.0, steps)
        points = inference.latent_path(a, b, ts, slerp).astype(np.float32)
        path = self.entries(self.decode(points, beam), points, start.strip())
        for entry, t in zip(path, ts):
            entry["t"] = float(t)
        return {"start": start.strip(), "end": end.strip(), "path": path, "slerp": slerp,
                "decoding": self.decoding_name(beam)}

    def sample(self, count: int = 12, temperature: float = 1.0, seed: int = 0) -> dict:
        """``count`` molecules sampled from the prior at ``temperature`` (0: greedy), as ``seqvae
        sample`` draws them: by rejection under the grammar where the run does so
        (``inference.rejection_rounds``; each molecule mapped at the z it came from), else in
        one decode (under the grammar mask for SMILES runs). ``sampler`` names which."""
        count = _clamp(count, "samples")
        temperature = float(temperature)
        check_sampling(temperature)
        z = inference.prior_draw(self.run, count, seed)  # the run's own prior
        rounds = inference.rejection_rounds(self.run)
        if temperature == 0:  # greedy, as `seqvae sample --temperature 0`
            return {"molecules": self.entries(inference.decode(self.run, z), z, None),
                    "temperature": temperature, "seed": seed, "sampler": "greedy"}
        if rounds:  # as `seqvae sample`: from the model conditioned on the grammar
            # a rejected row's molecule comes from a new z: the map shows that one
            texts, z = inference.rejection_sample(self.run, z, rounds, temperature, seed=seed,
                                                  return_z=True)
        else:
            ids = self._sampler(tf.constant(z), tf.constant([seed, 0]), tf.constant(temperature))
            texts = ids_to_texts(self.run.codec, ids.numpy())
        return {"molecules": self.entries(texts, z, None), "temperature": temperature,
                "seed": seed, "sampler": f"rejection, {rounds} rounds" if rounds else "mask"}

    def sample_where(self, count: int = 12, where: str = "", scaffold: str = "",
                     temperature: float = 1.0, seed: int = 0) -> dict:
        """``count`` distinct molecules that meet the conditions ``where`` (``"logp=2.5±0.5,
        qed>=0.7"``) and hold ``scaffold``, each checked by RDKit, as ``seqvae sample --where
        --scaffold`` finds them (``conditional.sample_where``), within ``WHERE_SECONDS``; each
        mapped at its encoding.

        Returns:
            ``{"molecules": [entry + "values"], "temperature", "seed", "sampler", "summary"}``;
            ``values`` maps each condition's property to the molecule's checked value.
        """
        from seqvae.conditional import sample_where

        count = _clamp(count, "samples")
        temperature = float(temperature)
        check_sampling(temperature)
        found = sample_where(self.run, count, where or (), (scaffold or "").strip() or None,
                             temperature=temperature, seed=seed, time_budget=WHERE_SECONDS,
                             head=getattr(self.head, "fitted", None))
        z = np.zeros((len(found.molecules), self.latent_dim), np.float32)
        kept, means, _ = inference.encode_writable(self.run, found.molecules)
        z[kept] = means
        shown = self.entries(found.molecules, z, None)
        for entry, values in zip(shown, found.values):
            entry["values"] = {name: float(v) for name, v in zip(found.names, values)}
        return {"molecules": shown, "temperature": temperature, "seed": seed,
                "sampler": "conditioned", "summary": found.summary()}

    def optimise(self, z: list[float], name: str | None = None, steps: int = 20,
                 minimize: bool = False, beam: bool = False, reference: str | None = None) -> dict:
        """Follows the property head's prediction of ``name`` (default: ``default_objective``) up
        (``minimize``: down) from ``z``; every point of the trajectory decoded at once, and each
        decoded molecule scored with RDKit where RDKit computes ``name``.

        Returns:
            ``{"path": [entry + "step", "predicted", "value"], "name", "minimize"}``; value
            None where the molecule is invalid or RDKit does not compute the property.
        """
        if self.head is None:
            raise SeqvaeError("this run has no property head to optimise")
        name = name or default_objective(self.head.names)
        if name not in self.head.names:
            raise SeqvaeError(f"the property head predicts {', '.join(self.head.names)}, "
                              f"not {name!r}")
        steps = _clamp(steps, "optimise_steps")
        path_z = np.asarray(self.head.optimise(np.asarray(z, np.float32), name, steps, minimize),
                            np.float32)  # (steps + 1, L)
        texts = self.decode(path_z, beam)
        shown = self.entries(texts, path_z, reference)
        predicted = self.predicted(path_z)[f"predicted:{name}"]
        values = molecules.rdkit_values(name, texts)
        for step, (entry, guess, value) in enumerate(zip(shown, predicted, values)):
            entry.update(step=step, predicted=float(guess), value=value)
        return {"path": shown, "name": name, "minimize": bool(minimize)}

    def predicted(self, z: np.ndarray) -> dict[str, np.ndarray]:
        """The head's predictions of ``z (N, L)``: float32 ``(N,)`` per ``"predicted:NAME"``."""
        values = np.asarray(self.head.predict(z), np.float32).reshape(len(z), -1)
        return {f"predicted:{name}": values[:, j] for j, name in enumerate(self.head.names)}

    # --- helpers -------------------------------------------------------------------------------

    def decoding_name(self, beam: bool) -> str:
        return f"beam {self.beam_width}" if beam else "greedy"

    def _properties(self, smiles: str, z: np.ndarray, index: int | None) -> dict:
        """The map's colour values of a map point, or computed for a typed molecule."""
        if index is not None:
            values = {key: float(v[index]) for key, v in self.map.properties.items()}
        else:
            values = {key: float(v[0]) for key, v in molecules.properties([smiles]).items()}
            if self.head is not None:
                values.update({key: float(v[0]) for key, v in self.predicted(z[None]).items()})
        return {key: (None if np.isnan(value) else value) for key, value in values.items()}


def _clamp(value, name: str) -> int:
    low, high = LIMITS[name]
    try:
        return int(min(max(int(value), low), high))
    except (TypeError, ValueError):
        raise SeqvaeError(f"{name} must be a whole number from {low} to {high}") from None
