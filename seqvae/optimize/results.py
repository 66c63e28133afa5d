"""What an optimisation found, written out: the results table (CSV), the trajectory of every
decoding, the path printed for one start, and the summary over the starts."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict
from typing import Sequence

import numpy as np

from seqvae.optimize.search import StartResult

RESULT_COLUMNS = ("start", "smiles", "start_value", "value", "similarity", "improvement",
                  "round", "restart", "step", "distance", "predicted", "candidates")


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
    """Every decoded point: start_index, round, restart, step, decoding, distance, predicted,
    smiles, value (RDKit), similarity."""
    columns = ("start_index", "round", "restart", "step", "decoding", "distance", "predicted",
               "smiles", "value", "similarity")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for point in trajectory:
        writer.writerow(["" if isinstance(point[c], float) and math.isnan(point[c]) else
                         f"{point[c]:.4f}" if isinstance(point[c], float) else point[c]
                         for c in columns])
    return buffer.getvalue()


def path_lines(trajectory: Sequence[dict], start_index: int = 0) -> list[str]:
    """The greedy decodings along each path of one start, a line per point: round, restart,
    step, distance from the start's encoding, the head's prediction, the molecule, its RDKit
    value and its similarity to the start."""
    lines = [f"{'round':>5} {'restart':>7} {'step':>4} {'|z-z0|':>6} {'predicted':>9} "
             f"{'value':>8} {'similarity':>10}  smiles"]
    for point in trajectory:
        if point["start_index"] != start_index or point["decoding"] != "greedy":
            continue
        value, similarity = (f"{point[key]:.3f}" if not math.isnan(point[key]) else "-"
                             for key in ("value", "similarity"))
        lines.append(f"{point['round']:>5} {point['restart']:>7} {point['step']:>4} "
                     f"{point['distance']:>6.2f} "
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
