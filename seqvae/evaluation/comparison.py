"""Several runs sampled and scored against the same molecules: a fine-tuning's before and after.

``compare_runs`` samples ``n`` molecules from each run (its own prior, its own sampling) and
scores them with ``moses_metrics`` against one held-out set (FCD, SNN, Frag, Scaf) and one
training set (Novelty), whose statistics are computed once for all runs. ``seqvae finetune``
prints it for BASE and the fine-tuned run; ``bench/finetune.py`` adds a run trained from
scratch on the same molecules.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from seqvae import inference
from seqvae.data import chemistry
from seqvae.evaluation import molecules, moses_metrics, references
from seqvae.run import Run

# The rows of the comparison, in order: (metric key, label).
COMPARED = (("valid", "valid"), ("unique@1000", "unique@1000"), ("Novelty", "novelty"),
            ("FCD/Test", "FCD to held-out"), ("SNN/Test", "SNN to held-out"),
            ("Frag/Test", "Frag to held-out"), ("Scaf/Test", "Scaf to held-out"),
            ("IntDiv", "IntDiv"))


def compare_runs(runs: dict[str, Run], test: Sequence[str], train: Sequence[str],
                 n: int = 1000, seed: int = 0, include_fcd: bool = True,
                 progress: Callable[[str], None] | None = None) -> dict:
    """Samples ``n`` molecules from each run and scores them against ``test`` and ``train``.

    Args:
      runs: name -> a molecule run, e.g. ``{"base": ..., "fine-tuned": ...}``.
      test: held-out SMILES (FCD, SNN, Frag, Scaf to them).
      train: the SMILES the runs were fine-tuned on (Novelty against them).
      n: molecules sampled from each run (unique@1000 is unique@n below 1,000).
      seed: the sampling seed.
      include_fcd: compute FCD (needs the fcd extra; a note if it is missing).
      progress: called with status lines.

    Returns:
      ``{"metrics": {name: {metric: value}}, "seconds": {name: sampling s}, "notes": [...],
      "n", "test", "train"}`` (``test``, ``train``: their sizes).
    """
    report = progress or (lambda line: None)
    notes: list[str] = []
    include_fcd = include_fcd and moses_metrics.fcd_available(True, notes)
    report(f"statistics of {len(test)} held-out molecules")
    test_stats = references.reference_stats(list(test), include_fcd=include_fcd,
                                            include_properties=True)
    no_bits = np.zeros((0, molecules.FINGERPRINT_BITS // 8), np.uint8)
    no_scaffolds = references.ReferenceStats(0, no_bits, {}, {})
    known = set(chemistry.remove_invalid(list(train), canonize=True))
    results, seconds = {}, {}
    for name, run in runs.items():
        report(f"sampling {n} molecules from {name} ({run.run_dir})")
        started = time.monotonic()
        samples = inference.sample(run, n, seed=seed)
        seconds[name] = time.monotonic() - started
        found: list[str] = []
        values = moses_metrics.moses_metrics(samples, train=known, test=test_stats,
                                             test_scaffolds=no_scaffolds,
                                             include_fcd=include_fcd, k=(min(n, 1000),),
                                             notes=found)
        if n < 1000:
            values["unique@1000"] = values.pop(f"unique@{n}")
        results[name] = values
        # not said: no FCD at all, or none to the scaffold split it does not score against
        notes += [f"{name}: {note}" for note in found
                  if not note.startswith(("FCD not computed", "FCD/TestSF"))]
    return {"metrics": results, "seconds": seconds, "notes": notes, "n": n, "test": len(test),
            "train": len(train)}


def format_comparison(comparison: dict) -> str:
    """The comparison as an aligned table: a row per metric, a column per run."""
    names = list(comparison["metrics"])
    labels = [label for _, label in COMPARED]
    width = max(len(label) for label in labels)
    columns = [max(len(name), 7) for name in names]
    lines = [f"{comparison['n']} samples from each; held-out: {comparison['test']} molecules, "
             f"novelty against the {comparison['train']} fine-tuned on",
             f"  {'':<{width}}  " + "  ".join(f"{n:>{c}}" for n, c in zip(names, columns))]
    for key, label in COMPARED:
        cells = []
        for name, column in zip(names, columns):
            value = comparison["metrics"][name].get(key)
            cells.append(f"{'-' if value is None else f'{value:.3f}':>{column}}")
        lines.append(f"  {label:<{width}}  " + "  ".join(cells))
    lines += [f"note: {note}" for note in comparison["notes"]]
    return "\n".join(lines) + "\n"
