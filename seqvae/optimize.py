"""Latent-space optimisation: better molecules near given ones, through the property head.

For each start molecule: encode it (posterior mean ``z0``), climb the head's prediction of the
objective by normalised gradient steps from ``z0`` and from perturbed restarts, never leaving
the trust region ``||z - z0|| <= trust_radius``; decode every point of every path under the
grammar mask, greedily and by sampling (all points of all starts in batched compiled decodes);
score every decoded molecule with the real RDKit property (never the predictor) and keep the
best one, other than the start, whose Tanimoto similarity to the start (Morgan radius 2,
2048 bits) is at least ``similarity``. Without start molecules the paths start at prior
samples and the search is unconstrained.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np

from seqvae.data import properties as props
from seqvae.errors import SeqvaeError
from seqvae.training.rundir import Run

RESULT_COLUMNS = ("start", "smiles", "start_value", "value", "similarity", "improvement",
                  "restart", "step", "distance", "predicted", "candidates")


@dataclass(frozen=True)
class OptimizeSettings:
    """How the search runs."""

    similarity: float = 0.4  # min Tanimoto to the start (Morgan r2, 2048 bits); 0 = unconstrained
    # Search size: 8 paths of 5 steps, 4 sampled decodings per point (240 decodings a start),
    # chosen on the demo-size runs (bench/optimize.md, session 17: 10 steps x 2 paths x 2 samples
    # found an improvement for 51% of the 800 lowest-plogP starts at δ 0.4, this 70%, in about
    # 3x the time: 5 CPU minutes for all 800 on a 2-core Xeon)
    steps: int = 5  # gradient steps per path
    restarts: int = 8  # paths per start: z0 itself, then z0 moved randomly by trust_radius / 2
    step_size: float = 0.25  # length of each (normalised) gradient step in latent units
    trust_radius: float = 2.0  # every point stays within this distance of the start's z0
    samples: int = 4  # sampled decodings per point, besides the greedy one
    temperature: float = 1.0  # of the sampled decodings
    minimize: bool = False  # search for lower values of the objective instead
    grammar: bool = True  # decode under the SMILES grammar mask
    seed: int = 0  # restarts and sampled decodings

    def __post_init__(self) -> None:
        if not 0.0 <= self.similarity <= 1.0:
            raise SeqvaeError(f"--similarity must be in [0, 1], got {self.similarity}")
        if self.steps < 0 or self.restarts < 1 or self.samples < 0:
            raise SeqvaeError("--steps and --samples must be >= 0 and --restarts >= 1")
        if not (self.step_size > 0 and self.trust_radius > 0 and self.temperature > 0):
            raise SeqvaeError("--step-size, --trust-radius and --temperature must be > 0")


@dataclass
class StartResult:
    """The best molecule found for one start (``smiles`` empty when none qualified)."""

    start: str
    smiles: str = ""
    start_value: float = math.nan
    value: float = math.nan
    similarity: float = math.nan
    improvement: float = math.nan  # value - start_value, sign-flipped for --minimize
    restart: int = -1  # the path and step where it was decoded
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
                    progress: Callable[[str], None] | None = None) -> SearchResult:
    """Searches from latent points ``z0 (S, L)``; ``starts[i]`` is the molecule of ``z0[i]``.

    Args:
      run: the loaded run.
      head: a ``property_fit.FittedHead`` that predicts ``objective``.
      objective: the property name; ``score`` (default: its RDKit function, ``Mol -> float``)
        gives the values in the results.
      constrained: apply ``settings.similarity`` to the start (False: report it only).
      keep_trajectory: return a row per decoded point (every path, step and decoding).
    """
    from seqvae import inference
    from seqvae.data.chemistry import canonical_smiles

    report = progress or (lambda line: None)
    score = score or props.rdkit_property(objective)
    index, sign = head.index(objective), -1.0 if settings.minimize else 1.0
    paths = ascent_paths(lambda z: sign * head.output(z)[:, index], z0, settings)  # (S, R, K, L)
    S, R, K, L = paths.shape
    flat = paths.reshape(-1, L)
    predicted = head.predict(flat)[:, index].reshape(S, R, K)
    report(f"decoding {len(flat)} points x {1 + settings.samples} (greedy + sampled)")
    decodings = [inference.decode(run, flat, greedy=True, grammar=settings.grammar)]
    if settings.samples:
        repeated = np.repeat(flat, settings.samples, axis=0)
        sampled = inference.decode(run, repeated, greedy=False, temperature=settings.temperature,
                                   seed=settings.seed, grammar=settings.grammar)
        decodings += [sampled[k::settings.samples] for k in range(settings.samples)]
    report(f"scoring the decoded molecules with RDKit ({objective})")
    return _select(starts, paths, predicted, decodings, score, settings, constrained,
                   keep_trajectory, canonical_smiles)


def _select(starts, paths, predicted, decodings, score, settings, constrained, keep_trajectory,
            canonical_smiles) -> SearchResult:
    """Scores every decoded molecule and keeps each start's best that qualifies."""
    from rdkit import rdBase

    S, R, K, _ = paths.shape
    sign = -1.0 if settings.minimize else 1.0
    threshold = settings.similarity if constrained else 0.0
    canonical, fingerprints, values = {}, {}, {}

    def canon(text):
        if text not in canonical:
            canonical[text] = canonical_smiles(text) if text else None
        return canonical[text]

    def fingerprint(smiles):
        if smiles not in fingerprints:
            fingerprints[smiles] = props.morgan_fingerprint(smiles)
        return fingerprints[smiles]

    def value(smiles):
        if smiles not in values:
            try:
                values[smiles] = float(score(props.chemistry.to_mol(smiles)))
            except (ValueError, RuntimeError, ZeroDivisionError, SeqvaeError):
                values[smiles] = math.nan
        return values[smiles]

    out, trajectory = [], []
    with rdBase.BlockLogs():
        for s in range(S):
            start = canon(starts[s]) if starts[s] else None
            result = StartResult(starts[s], start_value=value(start) if start else math.nan)
            start_fp, seen = fingerprint(start) if start else None, set()
            best = -math.inf
            for r in range(R):
                for k in range(K):
                    for d, decoded in enumerate(decodings):
                        text = decoded[(s * R + r) * K + k]
                        smiles = canon(text)
                        similarity = props.tanimoto(start_fp, fingerprint(smiles)) if smiles else math.nan
                        qualifies = smiles is not None and smiles != start and similarity >= threshold
                        v = value(smiles) if qualifies or (keep_trajectory and smiles) else math.nan
                        if keep_trajectory:
                            trajectory.append({
                                "start_index": s, "restart": r, "step": k, "decoding":
                                "greedy" if d == 0 else f"sample{d}", "distance":
                                float(np.linalg.norm(paths[s, r, k] - paths[s, 0, 0])),
                                "predicted": float(predicted[s, r, k]), "smiles": smiles or "",
                                "value": v, "similarity": similarity})
                        if not qualifies or math.isnan(v):
                            continue
                        if smiles not in seen:
                            seen.add(smiles)
                        if sign * v > best:
                            best = sign * v
                            result.smiles, result.value, result.similarity = smiles, v, similarity
                            result.restart, result.step = r, k
                            result.distance = float(np.linalg.norm(paths[s, r, k] - paths[s, 0, 0]))
                            result.predicted = float(predicted[s, r, k])
            result.candidates = len(seen)
            if result.smiles:
                result.improvement = sign * (result.value - result.start_value)
            out.append(result)
    return SearchResult(out, {k: v for k, v in values.items() if k and not math.isnan(v)},
                        trajectory)


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
    from seqvae.model import decoding
    from seqvae.training.property_fit import load_head

    head = head or load_head(run)
    if score is None:
        props.rdkit_property(objective)  # the objective must be one RDKit can re-score
        head.index(objective)
    latent = run.config.model.latent_dim
    if starts is None:
        if n < 1:
            raise SeqvaeError(f"-n must be at least 1, got {n}")
        z0 = decoding.prior_z(n, latent, settings.seed).numpy()
        texts = inference.decode(run, z0, greedy=True, grammar=settings.grammar)
        return optimize_latent(run, head, objective, z0, texts, settings, score, False,
                               keep_trajectory, progress)
    starts = list(starts)
    encoded = encode_texts(run.codec, starts, on_error="skip")
    if encoded.problems:
        shown = "; ".join(message for message in encoded.messages[:3])
        print(f"seqvae optimize: {len(encoded.problems)} start molecules cannot be encoded "
              f"({shown}{'; ...' if len(encoded.problems) > 3 else ''}); their rows stay empty",
              file=__import__("sys").stderr)
    if not len(encoded.ids):
        raise SeqvaeError("no start molecule can be encoded by this run")
    z0, _ = inference.encode_batches(run, encoded.ids)
    found = optimize_latent(run, head, objective, z0, encoded.texts, settings, score, True,
                            keep_trajectory, progress)
    rows = {int(row): result for row, result in zip(encoded.kept, found.results)}
    for row in range(len(starts)):
        if row not in rows:
            rows[row] = StartResult(starts[row])
    for point in found.trajectory:
        point["start_index"] = int(encoded.kept[point["start_index"]])
    found.results = [rows[row] for row in range(len(starts))]
    return found


def results_csv(results: Sequence[StartResult]) -> str:
    """The results file: a header, then one row per start (numbers with 4 decimals)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(RESULT_COLUMNS)
    for result in results:
        values = asdict(result)
        writer.writerow(["" if isinstance(values[c], float) and math.isnan(values[c]) else
                         f"{values[c]:.4f}" if isinstance(values[c], float) else values[c]
                         for c in RESULT_COLUMNS])
    return buffer.getvalue()


def trajectory_csv(trajectory: Sequence[dict]) -> str:
    """Every decoded point: start_index, restart, step, decoding, distance, predicted, smiles,
    value (RDKit), similarity."""
    columns = ("start_index", "restart", "step", "decoding", "distance", "predicted", "smiles",
               "value", "similarity")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for point in trajectory:
        writer.writerow(["" if isinstance(point[c], float) and math.isnan(point[c]) else
                         f"{point[c]:.4f}" if isinstance(point[c], float) else point[c]
                         for c in columns])
    return buffer.getvalue()


def path_lines(trajectory: Sequence[dict], start_index: int = 0) -> list[str]:
    """The greedy decodings along each path of one start, a line per point: restart, step,
    distance from the start's encoding, the head's prediction, the molecule, its RDKit value and
    its similarity to the start."""
    lines = [f"{'restart':>7} {'step':>4} {'|z-z0|':>6} {'predicted':>9} {'value':>8} "
             f"{'similarity':>10}  smiles"]
    for point in trajectory:
        if point["start_index"] != start_index or point["decoding"] != "greedy":
            continue
        value, similarity = (f"{point[key]:.3f}" if not math.isnan(point[key]) else "-"
                             for key in ("value", "similarity"))
        lines.append(f"{point['restart']:>7} {point['step']:>4} {point['distance']:>6.2f} "
                     f"{point['predicted']:>9.3f} {value:>8} {similarity:>10}  "
                     f"{point['smiles'] or '(invalid)'}")
    return lines


def summarize(results: Sequence[StartResult]) -> dict:
    """Success rate (a qualifying molecule better than the start) and the improvement's mean
    and sd over all starts, a start without success counting 0 (JT-VAE's protocol)."""
    gains = np.array([r.improvement if r.success else 0.0 for r in results])
    return {"starts": len(results), "success": float(np.mean([r.success for r in results])),
            "improvement_mean": float(gains.mean()) if len(gains) else math.nan,
            "improvement_sd": float(gains.std()) if len(gains) else math.nan,
            "found": int(sum(bool(r.smiles) for r in results))}
