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

matplotlib (the ``report`` extra) is imported inside the plotting functions, drawing on its Agg
canvas without touching pyplot's global state; without it the plots are skipped with a note.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from seqvae.errors import SeqvaeError
from seqvae.metrics import MissingExtraError
from seqvae.run import publish_file, read_jsonl, write_json_atomic, write_text_atomic

_MATPLOTLIB_HINT = "pip install matplotlib (or pip install 'seqvae[report]')"
_STYLE = {"font.size": 11, "axes.titlesize": 13, "axes.labelsize": 12, "legend.fontsize": 10,
          "xtick.labelsize": 10, "ytick.labelsize": 10}
PROPERTY_MOLECULES = 5000  # molecules per side in the property histograms (QED is ~1 ms each)
PLOTS = ("training_curves.png", "kl_per_dimension.png", "latent_map.png",
         "property_histograms.png")
SECTIONS = (("generation", "Generated samples (MOSES metrics)"),
            ("vae_quality", "VAE on held-out sequences (nats per sequence)"),
            ("reconstruction", "Reconstruction (Kusner et al. 2017)"),
            ("wall_seconds", "Wall time (seconds)"))


# --- plots ---------------------------------------------------------------------------------------


def _matplotlib() -> Any:
    try:
        import matplotlib
        import matplotlib.ticker  # noqa: F401  (matplotlib.ticker below)
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError as error:
        raise MissingExtraError(f"plots need matplotlib ({error}); {_MATPLOTLIB_HINT}") from None
    return matplotlib


def _figure(ncols: int = 1, width: float = 6.4, height: float = 4.8):
    """A Figure on its own Agg canvas and its axes (no pyplot, no global backend switch)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, ncols, squeeze=False)[0]
    return figure, list(axes)


def _save(figure, path: str) -> None:
    """Writes the PNG to a temporary file and renames it over ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".png")
    os.close(handle)
    try:
        figure.savefig(tmp, format="png", dpi=110)
        publish_file(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def plot_training_curves(records: Sequence[dict], path: str) -> None:
    """Training curves from metrics.jsonl records.

    Left: train ``loss`` and ``recon`` (kind "step") and ``val_loss`` (kind "epoch"); middle:
    ``kl``; right: ``kl_weight``; all against the optimizer step.

    Raises:
      SeqvaeError: no "step" records to plot.
      MissingExtraError: matplotlib is not installed.
    """
    matplotlib = _matplotlib()
    steps = [r for r in records if r.get("kind") == "step"]
    epochs = [r for r in records if r.get("kind") == "epoch" and "val_loss" in r]
    if not steps:
        raise SeqvaeError("no training steps logged in metrics.jsonl")
    x = [r["step"] for r in steps]
    with matplotlib.rc_context(_STYLE):
        figure, (loss_ax, kl_ax, weight_ax) = _figure(3, width=15, height=4.5)
        loss_ax.plot(x, [r["loss"] for r in steps], label="train loss")
        loss_ax.plot(x, [r["recon"] for r in steps], "--", label="train recon")
        if epochs:
            loss_ax.plot([r["step"] for r in epochs], [r["val_loss"] for r in epochs], "o-",
                         label="validation loss")
        loss_ax.set(title="Loss (recon + KL weight x KL)", xlabel="step",
                    ylabel="nats (recon: per token)")
        loss_ax.legend()
        kl_ax.plot(x, [r["kl"] for r in steps], color="tab:red")
        kl_ax.set(title="KL(q(z|x) || p(z))", xlabel="step", ylabel="nats per sequence")
        weight_ax.plot(x, [r["kl_weight"] for r in steps], color="tab:green")
        weight_ax.set(title="KL weight", xlabel="step", ylabel="weight")
        for ax in (loss_ax, kl_ax, weight_ax):
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
        _save(figure, path)


def plot_kl_per_dimension(kl_per_dimension: Sequence[float], path: str,
                          active: Sequence[bool] | None = None) -> None:
    """Bar chart of the KL of each latent dimension; active units coloured apart if given."""
    matplotlib = _matplotlib()
    values = np.asarray(kl_per_dimension, float)
    dims = np.arange(len(values))
    with matplotlib.rc_context(_STYLE):
        figure, (ax,) = _figure(width=max(6.4, min(16.0, 0.12 * len(values))))
        if active is None:
            ax.bar(dims, values, color="tab:blue")
        else:
            active = np.asarray(active, bool)
            for chosen, name, colour in ((active, "active", "tab:blue"),
                                         (~active, "inactive", "tab:gray")):
                if chosen.any():  # an empty group would still get a legend entry
                    ax.bar(dims[chosen], values[chosen], color=colour,
                           label=f"{name} units ({int(chosen.sum())})")
            ax.legend()
        ax.set(title=f"KL per latent dimension (total {values.sum():.2f} nats)",
               xlabel="latent dimension", ylabel="KL (nats, mean over test sequences)")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.grid(axis="y", alpha=0.3)
        _save(figure, path)


def pca_2d(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Projects ``points (N, D)`` on their first two principal components (numpy SVD).

    Returns:
      The projections ``(N, 2)`` (a zero column when D or N allows only one component) and the
      fraction of the variance each component explains ``(2,)``.
    """
    centred = np.asarray(points, np.float64) - np.mean(points, axis=0)
    _, singular, components = np.linalg.svd(centred, full_matrices=False)
    projected = np.zeros((len(centred), 2))
    kept = min(2, len(singular))
    projected[:, :kept] = centred @ components[:kept].T
    variance = singular**2
    explained = np.zeros(2)
    if variance.sum() > 0:
        explained[:kept] = variance[:kept] / variance.sum()
    return projected, explained


def plot_latent_map(means: np.ndarray, path: str, colour: Sequence[float] | None = None,
                    colour_label: str = "logP") -> None:
    """Scatter of encodings ``(N, L)`` on their first two principal components.

    Points are coloured by ``colour`` (e.g. logP); NaN values are drawn grey.
    """
    matplotlib = _matplotlib()
    projected, explained = pca_2d(means)
    with matplotlib.rc_context(_STYLE):
        figure, (ax,) = _figure(width=7.2, height=5.6)
        if colour is None:
            ax.scatter(projected[:, 0], projected[:, 1], s=8, alpha=0.7)
        else:
            colour = np.asarray(colour, float)
            known = np.isfinite(colour)
            points = ax.scatter(projected[known, 0], projected[known, 1], c=colour[known], s=8,
                                cmap="viridis", alpha=0.8)
            figure.colorbar(points, ax=ax, label=colour_label)
            if not known.all():
                ax.scatter(projected[~known, 0], projected[~known, 1], s=8, color="tab:gray",
                           label=f"no {colour_label}")
                ax.legend()
        ax.set(title=f"Test encodings E[z|x], PCA (n={len(projected)})",
               xlabel=f"PC 1 ({100 * explained[0]:.1f}% of variance)",
               ylabel=f"PC 2 ({100 * explained[1]:.1f}% of variance)")
        _save(figure, path)


def molecule_properties(smiles: Sequence[str]) -> dict[str, np.ndarray]:
    """logP, QED, molecular weight and length (SMILES tokens) of the valid molecules of a list."""
    from rdkit import rdBase

    from seqvae import metrics
    from seqvae.tokenizers import SmilesTokenizer

    tokenizer, cache, rows = SmilesTokenizer(), {}, []
    with rdBase.BlockLogs():
        for text in smiles:
            if text not in cache:
                mol = metrics.to_mol(text) if text else None
                cache[text] = None if mol is None else (
                    metrics.logp(mol), metrics.qed(mol), metrics.molecular_weight(mol),
                    len(tokenizer.tokenize(text)))
            if cache[text] is not None:
                rows.append(cache[text])
    table = np.array(rows, float).reshape(-1, 4)
    names = ("logP", "QED", "molecular weight", "length")
    return {name: table[:, i] for i, name in enumerate(names)}


def plot_property_histograms(generated: Sequence[str], test: Sequence[str], path: str,
                             molecules: bool = True) -> None:
    """Histograms of generated (valid) vs test sequences: logP, QED, molecular weight, length.

    Each side uses its first ``PROPERTY_MOLECULES`` entries. ``molecules=False`` (text runs)
    plots only the length in characters.
    """
    matplotlib = _matplotlib()
    generated, test = list(generated)[:PROPERTY_MOLECULES], list(test)[:PROPERTY_MOLECULES]
    if molecules:
        sides = {"generated (valid)": molecule_properties(generated),
                 "test": molecule_properties(test)}
        units = {"logP": "logP (Crippen)", "QED": "QED",
                 "molecular weight": "molecular weight (Da)", "length": "length (SMILES tokens)"}
    else:
        sides = {"generated": {"length": np.array([len(t) for t in generated], float)},
                 "test": {"length": np.array([len(t) for t in test], float)}}
        units = {"length": "length (characters)"}
    with matplotlib.rc_context(_STYLE):
        figure, axes = _figure(len(units), width=4.2 * len(units), height=4.2)
        for ax, (name, label) in zip(axes, units.items()):
            series = {side: values[name] for side, values in sides.items() if len(values[name])}
            if series:
                everything = np.concatenate(list(series.values()))
                bins = np.histogram_bin_edges(everything, bins=30)
                for side, values in series.items():
                    ax.hist(values, bins=bins, density=True, alpha=0.55,
                            label=f"{side} (n={len(values)})")
                ax.legend()
            ax.set(title=name, xlabel=label, ylabel="density")
        _save(figure, path)


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
              ("data_source", _format_value(results.get("data_source")))]
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
                 *, test_means: np.ndarray | None = None) -> str:
    """Writes ``RUN_DIR/report/`` (see the module docstring) and returns its path.

    Plots that cannot be drawn (no matplotlib, nothing logged yet) are skipped; the reason is
    appended to ``results["notes"]``, which ends up in metrics.json and report.md.

    Args:
      run_dir: the run directory.
      results: what ``seqvae.evaluate.evaluate`` computed.
      samples: the generated strings the metrics were computed on, invalid ones included.
      test_smiles: held-out sequences for the property histograms and the latent map.
      test_means: posterior means ``(len(test_smiles), L)`` of ``test_smiles`` for the latent
        map; None encodes ``test_smiles`` with the run's model.
    """
    folder = os.path.join(os.fspath(run_dir), "report")
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
            means, logp = _latent_map_inputs(run_dir, test_smiles, test_means, molecules)
            plot_latent_map(means, path, colour=logp)

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


def _latent_map_inputs(run_dir: str, texts: Sequence[str], means: np.ndarray | None,
                       molecules: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(means, logP or None) for ``plot_latent_map``, encoding ``texts`` if no means are given."""
    _matplotlib()  # fail before the encoding work when the plot cannot be drawn
    if means is None:
        from seqvae import inference
        from seqvae.run import load_run

        means, _ = inference.encode(load_run(run_dir), list(texts))
    if len(means) != len(texts):
        raise SeqvaeError(f"{len(means)} encodings for {len(texts)} test sequences")
    return means, (molecule_logp(texts) if molecules else None)


def molecule_logp(smiles: Sequence[str]) -> np.ndarray:
    """Crippen logP of each SMILES, NaN where it is not a valid molecule."""
    from rdkit import rdBase

    from seqvae import metrics

    values = np.full(len(smiles), np.nan)
    with rdBase.BlockLogs():
        for i, text in enumerate(smiles):
            mol = metrics.to_mol(text) if text else None
            if mol is not None:
                values[i] = metrics.logp(mol)
    return values
