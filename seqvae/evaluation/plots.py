"""The report's plots: training curves, KL per latent dimension, the latent map, and property
histograms of generated vs test molecules.

matplotlib (the ``report`` extra) is imported inside the plotting functions, drawing on its Agg
canvas without touching pyplot's global state; without it they raise ``MissingExtraError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from seqvae.data import chemistry
from seqvae.data.tokenizers import SmilesTokenizer
from seqvae.errors import SeqvaeError
from seqvae.evaluation.chemnet import MissingExtraError
from seqvae.files import atomic_path

_MATPLOTLIB_HINT = "pip install matplotlib (or pip install 'seqvae[report]')"


_STYLE = {"font.size": 11, "axes.titlesize": 13, "axes.labelsize": 12, "legend.fontsize": 10,
          "xtick.labelsize": 10, "ytick.labelsize": 10}


PROPERTY_MOLECULES = 5000  # molecules per side in the property histograms (QED is ~1 ms each)


def _matplotlib() -> Any:
    try:
        import matplotlib
        import matplotlib.ticker  # noqa: F401  (matplotlib.ticker below)
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
    """Writes the PNG atomically (``seqvae.files.atomic_path``)."""
    with atomic_path(path, suffix=".png") as tmp:
        figure.savefig(tmp, format="png", dpi=110)


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

    tokenizer, cache, rows = SmilesTokenizer(), {}, []
    with rdBase.BlockLogs():
        for text in smiles:
            if text not in cache:
                mol = chemistry.to_mol(text) if text else None
                cache[text] = None if mol is None else (
                    chemistry.logp(mol), chemistry.qed(mol), chemistry.molecular_weight(mol),
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


def molecule_logp(smiles: Sequence[str]) -> np.ndarray:
    """Crippen logP of each SMILES, NaN where it is not a valid molecule."""
    from rdkit import rdBase

    values = np.full(len(smiles), np.nan)
    with rdBase.BlockLogs():
        for i, text in enumerate(smiles):
            mol = chemistry.to_mol(text) if text else None
            if mol is not None:
                values[i] = chemistry.logp(mol)
    return values
