"""Latent-space optimisation: better molecules near given ones, through the property head.

For each start molecule: encode it (posterior mean ``z0``), climb the head's prediction of the
objective by normalised gradient steps from ``z0`` and from perturbed restarts, never leaving
the trust region ``||z - z0|| <= trust_radius`` (of where the path began); decode every point
of every path under the grammar mask, greedily and by sampling (all points of all starts in
batched compiled decodes; with ``beam``, also every beam hypothesis from each path's start;
with ``keep``, also completions of the start's own first tokens from each point's z);
score every decoded molecule with the real RDKit property (never the predictor) and keep the
best one, other than the start, whose Tanimoto similarity to the start (Morgan radius 2,
2048 bits) is at least ``similarity``. With ``rounds > 1`` the search goes on from what it
found: each later round encodes the ``elites`` best qualifying molecules of every start so far
(by their RDKit value) and climbs from there, the constraint still measured to the start. Without
start molecules the paths start at prior samples and the search is unconstrained.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from seqvae.data import properties as props
from seqvae.errors import SeqvaeError
from seqvae.messages import note
from seqvae.run import Run


@dataclass(frozen=True)
class OptimizeSettings:
    """How the search runs."""

    similarity: float = 0.4  # min Tanimoto to the start (Morgan r2, 2048 bits); 0 = unconstrained
    # Search size: 3 rounds of 2 paths of 5 steps; each point decoded greedily and by 2 samples,
    # free and with the first 70% of the start's tokens kept (216 decodings a start). Chosen on
    # the demo run (bench/optimize.md, earlier: on 200 of the 800 lowest-plogp MOSES test
    # molecules, the free search of 4 paths and 4 samples improved them by 2.18 at δ 0.4 (77%
    # of them) and 0.54 at δ 0.6 (39%); this one by 2.47 (95.5%) and 1.08 (79%) in 0.6x the time)
    steps: int = 5  # gradient steps per path
    restarts: int = 2  # paths per start and round: from z0 itself, then z0 moved randomly by
    # trust_radius / 2; in later rounds split among the elites
    step_size: float = 0.25  # length of each (normalised) gradient step in latent units
    trust_radius: float = 2.0  # every point stays within this distance of where its path began
    samples: int = 2  # sampled decodings per point, besides the greedy one
    temperature: float = 1.0  # of the sampled decodings
    beam: int = 0  # > 1: every hypothesis of a beam search this wide from each path's first point
    # Fractions of the start's tokens kept: for each, every point is also decoded (greedy + the
    # sampled ones) with that share of the start's own token sequence forced as a prefix, the
    # decoder completing it from z (edits near the start: the constraint holds more often)
    keep: tuple[float, ...] = (0.7,)
    rounds: int = 3  # searches, each later one from the best molecules found so far
    elites: int = 2  # molecules per start a later round climbs from (restarts // elites paths each)
    minimize: bool = False  # search for lower values of the objective instead
    grammar: bool = True  # decode under the SMILES grammar mask
    seed: int = 0  # restarts and sampled decodings

    def __post_init__(self) -> None:
        if not 0.0 <= self.similarity <= 1.0:
            raise SeqvaeError(f"similarity must be in [0, 1], got {self.similarity}")
        if self.steps < 0 or self.restarts < 1 or self.samples < 0 or self.beam < 0:
            raise SeqvaeError("steps, samples and beam must be >= 0 and restarts >= 1")
        if self.rounds < 1 or self.elites < 1:
            raise SeqvaeError("rounds and elites must be >= 1")
        if not (self.step_size > 0 and self.trust_radius > 0 and self.temperature > 0):
            raise SeqvaeError("step_size, trust_radius and temperature must be > 0")
        if any(not 0.0 < f < 1.0 for f in self.keep):
            raise SeqvaeError(f"keep fractions must be in (0, 1), got {list(self.keep)}")


@dataclass
class StartResult:
    """The best molecule found for one start (``smiles`` empty when none qualified)."""

    start: str
    smiles: str = ""
    start_value: float = math.nan
    value: float = math.nan
    similarity: float = math.nan
    improvement: float = math.nan  # value - start_value, sign-flipped for --minimize
    round: int = -1  # the round, path and step where it was decoded
    restart: int = -1
    step: int = -1
    distance: float = math.nan  # ||z - z0||
    predicted: float = math.nan  # the head's prediction at that z
    candidates: int = 0  # distinct valid molecules other than the start that qualified

    @property
    def success(self) -> bool:
        return bool(self.smiles) and self.improvement > 0


@dataclass
class SearchResult:
    """Per-start results, every distinct molecule scored, and the points of every path."""

    results: list[StartResult]
    scored: dict[str, float] = field(default_factory=dict)  # canonical SMILES -> RDKit value
    trajectory: list[dict] = field(default_factory=list)  # one row per decoded point


def gradient_of(predict: Callable) -> Callable:
    """The compiled gradient ``(z (B, L), *args) -> d sum(predict(z, *args)) / dz (B, L)``
    (``ascent_paths``'s; the explorer keeps one, so that its requests do not trace)."""
    import tensorflow as tf

    @tf.function(reduce_retracing=True, autograph=False)
    def gradient(z, *args):
        with tf.GradientTape() as tape:
            tape.watch(z)
            value = tf.reduce_sum(predict(z, *args))
        return tape.gradient(value, z)

    return gradient


def ascent_paths(predict: Callable | None, z0: np.ndarray, settings: OptimizeSettings,
                 gradient: Callable | None = None) -> np.ndarray:
    """Normalised gradient ascent on ``predict`` from each start and restart.

    Args:
      predict: ``z (B, L) -> (B,)`` a differentiable TensorFlow function, to be increased
        (unused when ``gradient`` is given).
      z0: float32 ``(S, L)`` starting points.
      gradient: ``z (B, L) -> (B, L)`` the gradient of ``predict``, compiled earlier (default:
        ``gradient_of(predict)``, traced on first use).

    Returns:
      float32 ``(S, R, steps + 1, L)``: the points of each path, ``[:, :, 0]`` its start
      (``z0`` for restart 0, ``z0`` moved by ``trust_radius / 2`` in a random direction after).
    """
    import tensorflow as tf

    gradient = gradient or gradient_of(predict)
    rng = np.random.default_rng(settings.seed)
    starts, restarts, latent = z0.shape[0], settings.restarts, z0.shape[1]
    centre = np.repeat(z0[:, None], restarts, axis=1).reshape(-1, latent)  # (S*R, L)
    shift = rng.standard_normal(centre.shape)
    shift *= settings.trust_radius / 2 / np.linalg.norm(shift, axis=1, keepdims=True)
    shift[::restarts] = 0.0  # restart 0 of each start is z0 itself
    z = centre + shift
    points = [z]
    for _ in range(settings.steps):
        g = gradient(tf.constant(z, tf.float32)).numpy()
        z = z + settings.step_size * g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
        offset = z - centre
        norm = np.linalg.norm(offset, axis=1, keepdims=True)
        z = centre + offset * np.minimum(1.0, settings.trust_radius / np.maximum(norm, 1e-12))
        points.append(z)
    return np.stack(points, axis=1).reshape(starts, restarts, settings.steps + 1,
                                            latent).astype(np.float32)


def optimize_latent(run: Run, head, objective: str, z0: np.ndarray, starts: Sequence[str],
                    settings: OptimizeSettings, score: Callable | None = None,
                    constrained: bool = True, keep_trajectory: bool = False,
                    progress: Callable[[str], None] | None = None,
                    start_ids: np.ndarray | None = None) -> SearchResult:
    """Searches from latent points ``z0 (S, L)``; ``starts[i]`` is the molecule of ``z0[i]``.

    Args:
      run: the loaded run.
      head: a ``property_fit.FittedHead`` that predicts ``objective``.
      objective: the property name; ``score`` (default: its RDKit function, ``Mol -> float``)
        gives the values in the results.
      constrained: apply ``settings.similarity`` to the start (False: report it only).
      keep_trajectory: return a row per decoded point (every round, path, step and decoding).
      start_ids: int ``(S, T)`` each start's token ids (``<eos>`` ended), for
        ``settings.keep``'s prefixes (ignored without it).
    """
    from rdkit import rdBase

    report = progress or (lambda line: None)
    index, sign = head.index(objective), -1.0 if settings.minimize else 1.0
    gradient = gradient_of(lambda z: sign * head.output(z)[:, index])
    scorer = _Scorer(score or props.rdkit_property(objective))
    threshold = settings.similarity if constrained else 0.0
    pools: list[dict[str, _Found]] = [{} for _ in starts]
    trajectory: list[dict] = []
    with rdBase.BlockLogs():
        canonical = [scorer.canon(text) if text else None for text in starts]
    centres = z0[:, None]  # (S, E, L): where each start's paths of this round begin
    for round_ in range(settings.rounds):
        if round_:
            centres = elite_centres(run, pools, z0, settings.elites, sign)
        restarts = settings.restarts if round_ == 0 else max(1, settings.restarts // centres.shape[1])
        round_settings = replace(settings, restarts=restarts, seed=settings.seed + round_)
        paths = ascent_paths(None, centres.reshape(-1, z0.shape[1]), round_settings, gradient)
        paths = paths.reshape(len(z0), -1, *paths.shape[2:])  # (S, R, K, L)
        flat = paths.reshape(-1, z0.shape[1])
        predicted = head.predict(flat)[:, index].reshape(paths.shape[:3])
        report(f"round {round_ + 1}/{settings.rounds}: decoding {len(flat)} points x "
               f"{1 + settings.samples} (greedy + sampled)"
               + (f", each also with {', '.join(f'{f:g}' for f in settings.keep)} of the start "
                  "kept" if start_ids is not None and settings.keep else "")
               + (f", {len(flat) // paths.shape[2]} x {settings.beam} beam hypotheses"
                  if settings.beam > 1 else ""))
        prefixes = None
        if start_ids is not None and settings.keep:
            prefixes = np.repeat(start_ids, flat.shape[0] // len(start_ids), axis=0)
        decodings = decode_points(run, flat, round_settings, first=paths.shape[2],
                                  prefixes=prefixes)
        report(f"round {round_ + 1}/{settings.rounds}: scoring the decoded molecules with RDKit "
               f"({objective})")
        with rdBase.BlockLogs():
            _collect(round_, paths, z0, predicted, decodings, canonical, scorer, threshold,
                     pools, trajectory if keep_trajectory else None)
    with rdBase.BlockLogs():  # the starts' own values
        results = [_best(start, canon, pool, scorer, sign)
                   for start, canon, pool in zip(starts, canonical, pools)]
    return SearchResult(results, scorer.scored(), trajectory)


def decode_points(run: Run, z: np.ndarray, settings: OptimizeSettings,
                  first: int = 0, prefixes: np.ndarray | None = None) -> dict[str, list]:
    """The decodings of every point ``z (N, L)``, by name: ``greedy``, ``sample1`` ...
    (``settings.samples`` sampled ones, in one batched decode), with ``settings.beam`` > 1
    ``beam1`` ... every hypothesis of a beam search from every ``first``-th point (a path's
    first point; None at the others), and with ``prefixes`` (int ``(N, T)``, ``<eos>``-ended
    token ids) for each fraction ``f`` of ``settings.keep`` ``keep{f}_greedy``,
    ``keep{f}_sample1`` ...: the same decodings forced to begin with the first ``f`` of the
    tokens of their row's prefix. Each a list of N texts."""
    from seqvae import inference
    from seqvae.data.vocabulary import EOS_ID

    def decodings_of(prefix_lengths=None, tag=""):
        forced = {} if prefix_lengths is None else {"prefix": prefixes,
                                                     "prefix_lengths": prefix_lengths}
        found = {f"{tag}greedy": inference.decode(run, z, greedy=True, grammar=settings.grammar,
                                                  **forced)}
        if settings.samples:
            if forced:
                forced = {key: np.repeat(value, settings.samples, axis=0)
                          for key, value in forced.items()}
            sampled = inference.decode(run, np.repeat(z, settings.samples, axis=0), greedy=False,
                                       temperature=settings.temperature, seed=settings.seed,
                                       grammar=settings.grammar, **forced)
            for k in range(settings.samples):
                found[f"{tag}sample{k + 1}"] = sampled[k::settings.samples]
        return found

    decodings = decodings_of()
    if prefixes is not None:
        counts = np.argmax(np.asarray(prefixes) == EOS_ID, axis=1)  # tokens before <eos>
        for fraction in settings.keep:
            lengths = np.floor(fraction * counts).astype(np.int32)
            decodings.update(decodings_of(lengths, f"keep{fraction:g}_"))
    if settings.beam > 1 and first:
        found = inference.beam_hypotheses(run, z[::first], settings.beam, settings.grammar)
        for k in range(settings.beam):
            column = [None] * len(z)
            column[::first] = [texts[k] for texts in found]
            decodings[f"beam{k + 1}"] = column
    return decodings


@dataclass(frozen=True)
class _Found:
    """A qualifying molecule: its RDKit value and where it was decoded."""

    value: float
    similarity: float
    round: int
    restart: int
    step: int
    z: np.ndarray  # (L,) the point it was decoded from
    distance: float  # ||z - z0||
    predicted: float


class _Scorer:
    """Canonical SMILES, fingerprints and RDKit values, each computed once per text."""

    def __init__(self, score: Callable):
        from seqvae.data.chemistry import canonical_smiles

        self._score, self._canonical_smiles = score, canonical_smiles
        self._canonical, self._fingerprints, self._values = {}, {}, {}

    def canon(self, text: str) -> str | None:
        if text not in self._canonical:
            self._canonical[text] = self._canonical_smiles(text) if text else None
        return self._canonical[text]

    def fingerprint(self, smiles: str):
        if smiles not in self._fingerprints:
            self._fingerprints[smiles] = props.morgan_fingerprint(smiles)
        return self._fingerprints[smiles]

    def value(self, smiles: str) -> float:
        if smiles not in self._values:
            try:
                self._values[smiles] = float(self._score(props.chemistry.to_mol(smiles)))
            except (ValueError, RuntimeError, ZeroDivisionError, SeqvaeError):
                self._values[smiles] = math.nan
        return self._values[smiles]

    def scored(self) -> dict[str, float]:
        return {k: v for k, v in self._values.items() if k and not math.isnan(v)}


def _collect(round_, paths, z0, predicted, decodings, canonical, scorer, threshold, pools,
             trajectory) -> None:
    """Adds every decoded molecule that qualifies (valid, not the start, similar enough) to its
    start's pool, and a row per decoding to ``trajectory`` (unless None)."""
    S, R, K, _ = paths.shape
    for s in range(S):
        start = canonical[s]
        start_fp = scorer.fingerprint(start) if start else None
        for r in range(R):
            for k in range(K):
                distance = float(np.linalg.norm(paths[s, r, k] - z0[s]))  # one per point
                for name, decoded in decodings.items():
                    text = decoded[(s * R + r) * K + k]
                    if text is None:  # not decoded this way at this point
                        continue
                    smiles = scorer.canon(text)
                    similarity = props.tanimoto(start_fp, scorer.fingerprint(smiles)) if smiles else math.nan
                    qualifies = smiles is not None and smiles != start and similarity >= threshold
                    v = scorer.value(smiles) if qualifies or (trajectory is not None and smiles) else math.nan
                    if trajectory is not None:
                        trajectory.append({
                            "start_index": s, "round": round_, "restart": r, "step": k,
                            "decoding": name, "distance": distance,
                            "predicted": float(predicted[s, r, k]), "smiles": smiles or "",
                            "value": v, "similarity": similarity})
                    if qualifies and not math.isnan(v) and smiles not in pools[s]:
                        pools[s][smiles] = _Found(v, similarity, round_, r, k, paths[s, r, k],
                                                  distance, float(predicted[s, r, k]))


def _best(start: str, canonical: str | None, pool: dict, scorer: _Scorer,
          sign: float) -> StartResult:
    """The start's row: its best qualifying molecule (the first found among equals)."""
    result = StartResult(start, start_value=scorer.value(canonical) if canonical else math.nan,
                         candidates=len(pool))
    if pool:
        smiles = max(pool, key=lambda key: sign * pool[key].value)  # first of equals: dict order
        found = pool[smiles]
        result.smiles, result.value, result.similarity = smiles, found.value, found.similarity
        result.round, result.restart, result.step = found.round, found.restart, found.step
        result.distance, result.predicted = found.distance, found.predicted
        result.improvement = sign * (result.value - result.start_value)
    return result


def elite_centres(run: Run, pools: Sequence[dict], z0: np.ndarray, elites: int,
                  sign: float) -> np.ndarray:
    """Where a later round climbs from: float32 ``(S, elites, L)``, the encodings (posterior
    means) of each start's ``elites`` best molecules so far; the point a molecule was decoded
    from where the run cannot encode it, the start's ``z0`` where fewer were found."""
    from seqvae import inference
    from seqvae.data.preparation import encode_texts

    centres = np.repeat(z0[:, None], elites, axis=1).astype(np.float32)
    chosen = [(s, e, smiles) for s, pool in enumerate(pools)
              for e, smiles in enumerate(sorted(pool, key=lambda key: -sign * pool[key].value)[:elites])]
    for s, e, smiles in chosen:
        centres[s, e] = pools[s][smiles].z
    encoded = encode_texts(run.codec, [smiles for _, _, smiles in chosen], on_error="skip")
    if len(encoded.ids):
        means, _ = inference.encode_batches(run, encoded.ids)
        for row, mean in zip(encoded.kept, means):
            s, e, _ = chosen[int(row)]
            centres[s, e] = mean
    return centres


def optimize(run: Run, objective: str, starts: Sequence[str] | None = None, n: int = 800,
             settings: OptimizeSettings = OptimizeSettings(), head=None,
             score: Callable | None = None, keep_trajectory: bool = False,
             progress: Callable[[str], None] | None = None) -> SearchResult:
    """``seqvae optimize``: from the start molecules (their encodings), or without them from
    ``n`` prior samples (unconstrained; a start is then the greedy decoding of its sample).

    Starts the run cannot encode (invalid, unknown tokens, too long) keep their row with an
    empty ``smiles``.
    """
    from seqvae import inference
    from seqvae.data.preparation import encode_texts
    from seqvae.property_fit import load_head

    head = head or load_head(run)
    if score is None:
        props.rdkit_property(objective)  # the objective must be one RDKit can re-score
        head.index(objective)
    if starts is None:
        if n < 1:
            raise SeqvaeError(f"-n must be at least 1, got {n}")
        z0 = inference.prior_draw(run, n, settings.seed)  # the run's own prior
        texts = inference.decode(run, z0, greedy=True, grammar=settings.grammar)
        return optimize_latent(run, head, objective, z0, texts, settings, score, False,
                               keep_trajectory, progress)
    starts = list(starts)
    encoded = encode_texts(run.codec, starts, on_error="skip")
    if encoded.problems:
        shown = "; ".join(message for message in encoded.messages[:3])
        note(f"seqvae optimize: {len(encoded.problems)} start molecules cannot be encoded "
             f"({shown}{'; ...' if len(encoded.problems) > 3 else ''}); their rows stay empty")
    if not len(encoded.ids):
        raise SeqvaeError("no start molecule can be encoded by this run")
    z0, _ = inference.encode_batches(run, encoded.ids)
    found = optimize_latent(run, head, objective, z0, encoded.texts, settings, score, True,
                            keep_trajectory, progress, start_ids=encoded.ids)
    rows = {int(row): result for row, result in zip(encoded.kept, found.results)}
    for row in range(len(starts)):
        if row not in rows:
            rows[row] = StartResult(starts[row])
    for point in found.trajectory:
        point["start_index"] = int(encoded.kept[point["start_index"]])
    found.results = [rows[row] for row in range(len(starts))]
    return found
