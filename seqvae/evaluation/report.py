"""The evaluation report: ``RUN_DIR/report/`` with metrics, samples, a markdown summary and plots.

Layout::

    RUN_DIR/report/
      metrics.json              everything ``seqvae.evaluate.evaluate`` returned (NaN -> null)
      samples.smi               the generated strings the metrics were computed on, one a line
      report.md                 tables of every metric, wall times, the plots, notes
      training_curves.png       loss, recon, val loss, KL and KL weight against the step
      kl_per_dimension.png      KL(q(z|x) || p(z)) of each latent dimension
      latent_map.png            test encodings on their first two principal components
      property_histograms.png   logP, QED, molecular weight and length: generated vs test

The report writes what it is given; it never loads or runs a model. The plots are in
``seqvae.evaluation.plots``; without matplotlib they are skipped with a note.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from seqvae.errors import SeqvaeError
from seqvae.evaluation.chemnet import MissingExtraError
from seqvae.evaluation.plots import (molecule_logp, plot_kl_per_dimension, plot_latent_map,
                                     plot_property_histograms, plot_training_curves)
from seqvae.files import read_jsonl, write_json_atomic, write_text_atomic

PLOTS = ("training_curves.png", "kl_per_dimension.png", "latent_map.png",
         "property_histograms.png")
SECTIONS = (("generation", "Generated samples (MOSES metrics)"),
            ("vae_quality", "VAE on held-out sequences (nats per sequence)"),
            ("reconstruction", "Reconstruction (Kusner et al. 2017) and interpolation"),
            ("wall_seconds", "Wall time (seconds)"))


# --- plots ---------------------------------------------------------------------------------------


# --- tables --------------------------------------------------------------------------------------


def _format_value(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def _rows(results: dict) -> list[tuple[str, list[tuple[str, str]]]]:
    """(section title, [(name, formatted value)]) for each section present; lists are left out."""
    sections = []
    header = [("n_samples", _format_value(results.get("n_samples"))),
              ("seed", _format_value(results.get("seed"))),
              ("tokenizer", _format_value(results.get("tokenizer"))),
              ("data_source", _format_value(results.get("data_source"))),
              ("grammar mask", _format_value(results.get("grammar")))]
    if results.get("prior_description"):
        header.append(("samples' z from", results["prior_description"]))
    sampling = results.get("sampling") or {}
    if sampling.get("rejection_rounds"):  # what the grammar rejected, so raw validity shows
        header += [("rejection rounds", _format_value(sampling["rejection_rounds"])),
                   ("rejected first draws", _format_value(sampling.get("rejected"))),
                   ("masked after the rounds", _format_value(sampling.get("masked")))]
    header += [(f"reference {name}", _format_value(value))
               for name, value in (results.get("references") or {}).items()]
    sections.append(("Run", header))
    for key, title in SECTIONS:
        values = results.get(key)
        if values is None:
            sections.append((title, [("not computed", "see notes")]))
            continue
        sections.append((title, [(name, _format_value(value)) for name, value in values.items()
                                 if not isinstance(value, (list, tuple, dict))]))
    if results.get("properties"):  # only runs with a property head (fitted or joint)
        sections.append(("Property head on the test molecules",
                         [(name, _format_value(value)) for name, value in results["properties"].items()]))
    return sections


def format_table(results: dict) -> str:
    """The results of ``evaluate`` as aligned plain-text tables for the terminal."""
    lines = []
    for title, rows in _rows(results):
        width = max(len(name) for name, _ in rows)
        lines.append(title)
        lines.extend(f"  {name:<{width}}  {value}" for name, value in rows)
        lines.append("")
    for note in results.get("notes") or []:
        lines.append(f"note: {note}")
    if results.get("report_dir"):
        lines.append(f"report: {results['report_dir']}")
    return "\n".join(lines).rstrip() + "\n"


def _markdown(results: dict, plots: dict[str, str]) -> str:
    lines = [f"# seqvae evaluation of `{results.get('run_dir', '')}`", ""]
    for title, rows in _rows(results):
        lines += [f"## {title}", "", "| metric | value |", "|---|---|"]
        lines += [f"| {name} | {value} |" for name, value in rows]
        lines.append("")
    if plots:
        lines += ["## Plots", ""]
        lines += [f"![{title}]({name})\n" for name, title in plots.items()]
    notes = results.get("notes") or []
    if notes:
        lines += ["## Notes", ""] + [f"- {note}" for note in notes] + [""]
    return "\n".join(lines)


def _json_safe(value: Any) -> Any:
    """NaN and infinities -> None (strict JSON), numpy scalars -> Python numbers."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


# --- the report ----------------------------------------------------------------------------------


def write_report(run_dir: str, results: dict, samples: Sequence[str], test_smiles: Sequence[str],
                 *, test_means: np.ndarray | None = None, folder: str | None = None) -> str:
    """Writes ``RUN_DIR/report/`` (or ``folder``; see the module docstring) and returns its path.

    Plots that cannot be drawn (no matplotlib, nothing logged yet) are skipped; the reason is
    appended to ``results["notes"]``, which ends up in metrics.json and report.md.

    Args:
      run_dir: the run directory.
      results: what ``seqvae.evaluate.evaluate`` computed.
      samples: the generated strings the metrics were computed on, invalid ones included.
      test_smiles: held-out sequences for the property histograms and the latent map.
      test_means: posterior means ``(len(test_smiles), L)`` of ``test_smiles`` for the latent
        map (the report draws no latent map without them).
      folder: where to write it (None: ``RUN_DIR/report``).
    """
    folder = folder or os.path.join(os.fspath(run_dir), "report")
    os.makedirs(folder, exist_ok=True)
    notes = results.setdefault("notes", [])
    molecules = results.get("tokenizer", "smiles") in ("smiles", "selfies")
    quality = results.get("vae_quality") or {}
    plots: dict[str, str] = {}

    def draw(name: str, title: str, plot) -> None:
        try:
            plot(os.path.join(folder, name))
            plots[name] = title
        except MissingExtraError as error:
            if not any(n.startswith("plots not drawn") for n in notes):
                notes.append(f"plots not drawn: {error}")
        except SeqvaeError as error:
            notes.append(f"{name} not drawn: {error}")

    draw("training_curves.png", "Training curves", lambda path: plot_training_curves(
        read_jsonl(os.path.join(run_dir, "metrics.jsonl")), path))
    if quality.get("kl_per_dimension"):
        threshold = quality.get("active_unit_threshold", 0.01)
        active = [v > threshold for v in quality.get("posterior_mean_variance", [])] or None
        draw("kl_per_dimension.png", "KL per latent dimension",
             lambda path: plot_kl_per_dimension(quality["kl_per_dimension"], path, active))
    if len(test_smiles):
        def latent_map(path: str) -> None:
            if test_means is None or len(test_means) != len(test_smiles):
                raise SeqvaeError("no encodings of the test sequences were given")
            plot_latent_map(test_means, path,
                            colour=molecule_logp(test_smiles) if molecules else None)

        draw("latent_map.png", "Latent map (PCA of test encodings"
             + (", coloured by logP)" if molecules else ")"), latent_map)
    if len(samples) and len(test_smiles):
        draw("property_histograms.png", "Properties: generated vs test",
             lambda path: plot_property_histograms(samples, test_smiles, path, molecules))

    for name in PLOTS:  # a plot from an earlier report that was not redrawn would mislead
        if name not in plots and os.path.exists(os.path.join(folder, name)):
            os.remove(os.path.join(folder, name))
    write_text_atomic(os.path.join(folder, "samples.smi"), "".join(f"{s}\n" for s in samples))
    write_text_atomic(os.path.join(folder, "report.md"), _markdown(results, plots))
    write_json_atomic(os.path.join(folder, "metrics.json"), _json_safe(results))
    return folder


