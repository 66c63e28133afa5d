"""Fitting a property head on a trained run's encodings, saving it, and using it.

``fit_properties(run_dir)`` (``seqvae fit-properties RUN``) computes the properties of the run's
training molecules (cached in ``RUN/properties/``), encodes them to their posterior means,
standardises the properties and fits a ``PropertyHead`` by MSE; the head is written to
``RUN/property_head/`` (``head.json`` with names, standardisation and test metrics, and
``head.weights.h5``), so an existing run gains a head without retraining the VAE.

A fitted head reads standardised encodings, ``(z - z_mean) / z_std`` per dimension with the fit
encodings' statistics (stored in ``head.json``): posterior means spread far less than the prior's
unit scale, unevenly across dimensions, and a tanh MLP from its default initialisation learns
slowly on such inputs (on a short run's encodings the unstandardised head stayed below a linear
fit after 60 epochs). The jointly trained head reads z as it is.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from seqvae.data import properties as props
from seqvae.data.moses import is_moses
from seqvae.errors import SeqvaeError
from seqvae.files import atomic_path, write_json_atomic
from seqvae.run import Run, load_run

HEAD_DIR = "property_head"
CACHE_DIR = "properties"
DEFAULT_PROPERTIES = ("logp", "qed", "sa", "plogp", "mw")


@dataclass
class FittedHead:
    """A property head with what it needs to speak in the properties' own units."""

    names: tuple[str, ...]
    mean: np.ndarray  # float64 (P,), the training targets' mean
    std: np.ndarray  # float64 (P,), their standard deviation
    model: object  # PropertyHead: standardised z (B, L) -> standardised properties (B, P)
    info: dict  # head.json
    z_mean: np.ndarray | float = 0.0  # float32 (L,): the model reads (z - z_mean) / z_std
    z_std: np.ndarray | float = 1.0  # float32 (L,)

    def output(self, z):
        """Standardised properties ``(B, P)`` of latent vectors ``z (B, L)``, differentiable in z
        (TensorFlow): what gradient ascent climbs."""
        return self.model((z - self.z_mean) / self.z_std)

    def predict(self, z: np.ndarray, batch_size: int = 4096) -> np.ndarray:
        """float64 ``(N, P)`` properties, in their units, of latent vectors ``z (N, L)``."""
        out = [self.output(np.asarray(z[s:s + batch_size], np.float32)).numpy()
               for s in range(0, len(z), batch_size)]
        return np.concatenate(out).astype(np.float64) * self.std + self.mean if out else \
            np.zeros((0, len(self.names)))

    def index(self, name: str) -> int:
        if name not in self.names:
            raise SeqvaeError(f"the property head predicts {', '.join(self.names)}, not {name!r}; "
                              f"fit it with 'seqvae fit-properties RUN --properties ...,{name}'")
        return self.names.index(name)


def property_table(run: Run, data, names: Sequence[str], limit: int = 0,
                   cache: bool = True) -> props.PropertyTable:
    """``props.read_property_table`` of ``data``, cached in ``RUN/properties/`` (``Run.output_dir``:
    the user's cache for a shipped model) by source, limit and names (the RDKit work is done once
    per molecule and run: molecules of earlier tables of the same properties are not computed
    again)."""
    names = props.parse_property_names(names)
    key = hashlib.sha256(repr((str(data), limit, names)).encode()).hexdigest()[:16]
    path = os.path.join(run.output_dir(CACHE_DIR), f"{key}.npz")
    if cache and isinstance(data, str) and os.path.exists(path):
        with np.load(path, allow_pickle=False) as stored:
            return props.PropertyTable(stored["texts"].tolist(), names, stored["values"],
                                       stored["line_numbers"].tolist(), str(stored["source"]))
    known = _cached_values(run, names) if cache else None
    table = props.read_property_table(data, names, run.config.data.column, limit, known=known)
    if cache and isinstance(data, str):
        save_table(path, table)
    return table


def save_table(path: str, table: props.PropertyTable) -> None:
    """Writes ``table`` atomically as ``property_table`` caches it (``known_properties`` reads
    it back)."""
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez_compressed(tmp, texts=np.array(table.texts), values=table.values,
                            line_numbers=np.array(table.line_numbers),
                            source=np.array(table.source), names=np.array(table.names))


def _cached_values(run: Run, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """``{molecule: values (P,)}`` from the run's cached tables of the same RDKit properties
    (any source or limit): a fit on more molecules computes only the new ones. Empty for
    ``col:`` properties, whose values belong to their file."""
    if any(name.startswith(props.COLUMN_PREFIX) for name in names):
        return {}
    known: dict[str, np.ndarray] = {}
    for stored_names, texts, values, _ in _stored_tables(run):
        if stored_names == names:
            known.update(zip(texts, values))
    return known


def _stored_tables(run: Run):
    """``(names, texts, values (N, P), source)`` of each table cached in ``RUN/properties/``
    that records its names (tables cached before names were stored, and a joint run's
    training.npz, do not), in file-name order; for a shipped model, the tables it ships with
    (``RUN_DIR/properties/``) first."""
    folders = [run.output_dir(CACHE_DIR)]
    if run.pretrained:
        folders.insert(0, os.path.join(run.run_dir, CACHE_DIR))
    for folder in folders:
        if not os.path.isdir(folder):
            continue
        for entry in sorted(os.listdir(folder)):
            if not entry.endswith(".npz"):
                continue
            with np.load(os.path.join(folder, entry), allow_pickle=False) as stored:
                if {"names", "texts", "values"} <= set(stored.files):
                    yield (tuple(stored["names"].tolist()), stored["texts"].tolist(),
                           stored["values"], str(stored["source"]))


def known_properties(run: Run, names: Sequence[str]) -> props.PropertyTable | None:
    """The molecules whose ``names`` properties the run has cached (``property_table``: a head's
    fit, its test report), each once with those values in ``names`` order; None when no cached
    table holds them all. Molecules with an unknown value are left out."""
    names = tuple(names)
    texts: list[str] = []
    rows: list[np.ndarray] = []
    sources: list[str] = []
    seen: set[str] = set()
    for stored_names, stored_texts, values, source in _stored_tables(run):
        if not set(names) <= set(stored_names):
            continue
        columns = values[:, [stored_names.index(name) for name in names]]
        keep = [i for i, text in enumerate(stored_texts)
                if text not in seen and not np.isnan(columns[i]).any()]
        seen.update(stored_texts[i] for i in keep)
        texts += [stored_texts[i] for i in keep]
        rows.append(columns[keep])
        sources.append(source)
    if not texts:
        return None
    return props.PropertyTable(texts, names, np.concatenate(rows), list(range(1, len(texts) + 1)),
                               " + ".join(dict.fromkeys(sources)))


def encoded_table(run: Run, table: props.PropertyTable, notes: list[str]):
    """``(z_mean (N, L), values (N, P), texts)`` of the rows with every property known that the
    run can encode; each left-out group gets a note."""
    from seqvae import inference
    from seqvae.data.preparation import encode_texts

    note = table.nan_note()
    if note:
        notes.append(note)
    keep = np.flatnonzero(~table.nan_rows())
    encoded = encode_texts(run.codec, [table.texts[i] for i in keep], on_error="skip",
                           check_molecules=False)
    if encoded.problems:
        notes.append(f"{table.source}: {len(encoded.problems)} molecules the run cannot encode "
                     "(tokens outside its vocabulary or too long); left out")
    if not len(encoded.ids):
        raise SeqvaeError(f"{table.source}: no molecule with known properties that the run can encode")
    means, _ = inference.encode_batches(run, encoded.ids)
    rows = keep[encoded.kept]
    return means, table.values[rows], encoded.texts


SCHEDULES = ("cosine", "constant")


def fit_head(z: np.ndarray, values: np.ndarray, depth: int = 3, width: int = 67,
             epochs: int = 60, batch_size: int = 256, learning_rate: float = 1e-3,
             validation_fraction: float = 0.05, seed: int = 0, schedule: str = "cosine",
             activation: str = "silu"):
    """Fits a ``PropertyHead`` to ``z (N, L) -> values (N, P)`` by MSE on standardised values.

    Adam with minibatches, its rate ``learning_rate`` throughout (``schedule="constant"``) or
    decayed along a half cosine to 1% of it by the last step (``"cosine"``, Keras'
    ``CosineDecay``); the weights of the epoch with the lowest loss on a held-out
    ``validation_fraction`` are kept. ``activation`` of the hidden layers: SiLU, not the
    chemical VAE's tanh, which saturates (on the demo run's 500,000 encodings at 4 x 512, R² on
    MOSES test logP 0.891 constant tanh, 0.899 cosine tanh, 0.926 cosine SiLU; QED 0.812,
    0.828, 0.863: bench/optimize.md).

    Returns:
      ``(head, mean (P,), std (P,), history)``, history a list of ``(train, validation)`` MSEs.
    """
    import keras
    import tensorflow as tf

    from seqvae.model.property_head import ACTIVATIONS, PropertyHead, property_loss

    keras.utils.set_random_seed(seed)
    mean, std = props.standardisation(values)
    targets = ((values - mean) / std).astype(np.float32)
    z = np.asarray(z, np.float32)
    order = np.random.default_rng(seed).permutation(len(z))
    n_val = int(len(z) * validation_fraction) if len(z) >= 20 else 0
    val, train = order[:n_val], order[n_val:]
    if schedule not in SCHEDULES or activation not in ACTIVATIONS:
        raise SeqvaeError(f"the head's schedule must be one of {', '.join(SCHEDULES)} and its "
                          f"activation one of {', '.join(ACTIVATIONS)}, got {schedule!r}, "
                          f"{activation!r}")
    head = PropertyHead(values.shape[1], depth, width, activation).build_weights(z.shape[1])
    batches = max(1, len(train) // batch_size)
    rate = (keras.optimizers.schedules.CosineDecay(learning_rate, epochs * batches, alpha=0.01)
            if schedule == "cosine" else learning_rate)
    optimizer = keras.optimizers.Adam(rate)

    @tf.function(reduce_retracing=True, autograph=False)
    def step(zb, yb):
        with tf.GradientTape() as tape:
            loss = property_loss(yb, head(zb, training=True))
        optimizer.apply(tape.gradient(loss, head.trainable_variables), head.trainable_variables)
        return loss

    rng, history = np.random.default_rng(seed + 1), []
    best, best_weights = float("inf"), head.get_weights()
    for _ in range(epochs):
        shuffled = rng.permutation(train)
        losses = [float(step(z[b], targets[b])) for b in np.array_split(shuffled, batches)]
        val_loss = (float(property_loss(targets[val], head(z[val]))) if n_val else float(np.mean(losses)))
        history.append((float(np.mean(losses)), val_loss))
        if val_loss < best:
            best, best_weights = val_loss, head.get_weights()
    head.set_weights(best_weights)
    return head, mean, std, history


def regression_metrics(values: np.ndarray, predicted: np.ndarray, names: Sequence[str]) -> dict:
    """``{name: {"r2", "mae", "n"}}``: R² = 1 - SS_res / SS_tot and the mean absolute error, in
    the property's units, over the rows where the true value is known."""
    out = {}
    for j, name in enumerate(names):
        known = ~np.isnan(values[:, j])
        y, p = values[known, j], predicted[known, j]
        total = float(np.sum((y - y.mean()) ** 2)) if len(y) else 0.0
        out[name] = {"r2": 1.0 - float(np.sum((y - p) ** 2)) / total if total > 0 else float("nan"),
                     "mae": float(np.mean(np.abs(y - p))) if len(y) else float("nan"),
                     "n": int(len(y))}
    return out


def head_metrics(run: Run, head: FittedHead, data, limit: int = 0,
                 notes: list[str] | None = None) -> dict:
    """``regression_metrics`` of the head on molecules ``data`` (path, ``moses:SPLIT``, list)."""
    notes = [] if notes is None else notes
    table = property_table(run, data, head.names, limit)
    z, values, _ = encoded_table(run, table, notes)
    return regression_metrics(values, head.predict(z), head.names)


def fit_properties(run_dir: str, names: Sequence[str] | str = DEFAULT_PROPERTIES, data=None,
                   limit: int = 50_000, test="default", test_limit: int = 10_000,
                   epochs: int = 60, batch_size: int = 256, learning_rate: float = 1e-3,
                   seed: int = 0, depth: int | None = None, width: int | None = None,
                   schedule: str = "cosine", activation: str = "silu",
                   progress: Callable[[str], None] | None = None) -> dict:
    """Fits a property head on a run's encodings and saves it in ``RUN/property_head/``.

    Args:
      run_dir: a trained run directory.
      names: properties (``seqvae.data.properties``), a list or ``"logp,qed"``.
      data: the molecules to fit on; None = the run's training source (``run.json``).
      limit: the first this many molecules of ``data`` (0 = all).
      test: molecules for the R²/MAE report; ``"default"`` = MOSES's test split for a MOSES
        run, none otherwise; None skips the report.
      test_limit: the first this many test molecules (0 = all).
      epochs, batch_size, learning_rate, seed, schedule, activation: the fit (``fit_head``).
      depth, width: the head's shape (None: the run's ``model.property_head_depth`` and
        ``model.property_head_width``, the chemical VAE's 3 x 67 by default). A fitted head
        does not shape z, so a larger one only predicts better: fitted on the demo run's
        encodings of 500,000 MOSES molecules, 4 x 512 SiLU reaches R² 0.926 (logP) and 0.863
        (QED) on MOSES test; the default on 50,000, 0.784 and 0.611 (bench/optimize.md).
      progress: called with status lines.

    Returns:
      The saved ``head.json`` contents: names, mean, std, sizes, ``test`` metrics, notes.
    """
    report = progress or (lambda line: None)
    run = load_run(run_dir)
    run.check_writable("seqvae fit-properties")
    depth = run.config.model.property_head_depth if depth is None else depth
    width = run.config.model.property_head_width if width is None else width
    from seqvae.model.property_head import ACTIVATIONS

    if (depth < 0 or width < 1 or not learning_rate > 0 or epochs < 1
            or schedule not in SCHEDULES or activation not in ACTIVATIONS):
        raise SeqvaeError(f"the head needs depth >= 0, width >= 1, epochs >= 1, "
                          f"learning_rate > 0, schedule {' or '.join(SCHEDULES)} and "
                          f"activation {' or '.join(ACTIVATIONS)}, got {depth}, {width}, "
                          f"{epochs}, {learning_rate}, {schedule!r}, {activation!r}")
    if not run.codec.molecules:
        raise SeqvaeError(f"{run.run_dir}: properties need a molecule run (smiles or selfies), "
                          f"this one is {run.info['tokenizer']!r}")
    names = props.parse_property_names(names)
    data = data if data is not None else run.info.get("data_source")
    if data is None:
        raise SeqvaeError(f"{run.run_dir}: run.json names no training data; give the molecules to fit on")
    notes: list[str] = []
    report(f"computing {', '.join(names)} for {f'up to {limit}' if limit else 'all'} molecules "
           f"of {data}")
    table = property_table(run, data, names, limit)
    report(f"encoding {len(table.texts)} molecules")
    z, values, _ = encoded_table(run, table, notes)
    report(f"fitting the head on {len(z)} encodings")
    z_mean, z_std = props.standardisation(z)
    z_mean, z_std = z_mean.astype(np.float32), z_std.astype(np.float32)
    head, mean, std, history = fit_head((z - z_mean) / z_std, values, depth, width, epochs,
                                        batch_size, learning_rate, seed=seed,
                                        schedule=schedule, activation=activation)
    info = {"names": list(names), "mean": mean.tolist(), "std": std.tolist(), "depth": depth,
            "width": width, "latent_dim": int(z.shape[1]), "z_mean": z_mean.tolist(),
            "z_std": z_std.tolist(), "fitted_on": str(data),
            "fit_molecules": int(len(z)), "epochs": epochs, "learning_rate": learning_rate,
            "schedule": schedule, "activation": activation,
            "final_mse": {"train": history[-1][0], "validation": min(v for _, v in history)},
            "notes": notes, "test": None}
    fitted = FittedHead(names, mean, std, head, info, z_mean, z_std)
    if test == "default":
        test = "moses:test" if is_moses(run.info.get("data_source")) else None
    if test is not None:
        report(f"R² and MAE on {test_limit or 'all'} molecules of {test}")
        info["test"] = head_metrics(run, fitted, test, test_limit, notes)
        info["test_source"] = str(test)
    save_head(run.run_dir, fitted)
    return info


def save_head(run_dir: str, head: FittedHead) -> str:
    """Writes ``RUN/property_head/head.weights.h5`` and ``head.json``; returns the folder."""
    folder = os.path.join(run_dir, HEAD_DIR)
    os.makedirs(folder, exist_ok=True)
    with atomic_path(os.path.join(folder, "head.weights.h5"), suffix=".weights.h5") as tmp:
        head.model.save_weights(tmp)
    write_json_atomic(os.path.join(folder, "head.json"), head.info)
    return folder


def has_head(run: Run) -> bool:
    """Whether the run has a property head: fitted afterwards or trained jointly."""
    return (os.path.exists(os.path.join(run.run_dir, HEAD_DIR, "head.json"))
            or bool(run.info.get("properties")) and getattr(run.model, "property_head", None) is not None)


def load_head(run: Run) -> FittedHead:
    """The property head of a run: the one fitted afterwards (``RUN/property_head/``), else the
    one trained jointly with the VAE (``data.properties``)."""
    from seqvae.model.property_head import PropertyHead

    folder = os.path.join(run.run_dir, HEAD_DIR)
    path = os.path.join(folder, "head.json")
    joint = run.info.get("properties")
    if not os.path.exists(path) and joint and getattr(run.model, "property_head", None) is not None:
        return FittedHead(tuple(joint["names"]), np.array(joint["mean"]), np.array(joint["std"]),
                          run.model.property_head, {"names": joint["names"], "joint": True})
    if not os.path.exists(path):
        raise SeqvaeError(f"{run.run_dir}: has no property head; fit one with "
                          f"'seqvae fit-properties {run.run_dir}'")
    import json

    try:
        with open(path) as handle:
            info = json.load(handle)
        # heads fitted earlier have no "activation": tanh, the chemical VAE's
        model = PropertyHead(len(info["names"]), info["depth"], info["width"],
                             info.get("activation", "tanh"))
        model.build_weights(info["latent_dim"])
        model.load_weights(os.path.join(folder, "head.weights.h5"))
    except (ValueError, KeyError, OSError) as error:
        raise SeqvaeError(f"{folder}: corrupted property head ({str(error).splitlines()[0][:150]}); "
                          "fit it again with 'seqvae fit-properties'") from None
    latent = info["latent_dim"]  # heads saved before z standardisation read z as it is
    return FittedHead(tuple(info["names"]), np.array(info["mean"]), np.array(info["std"]),
                      model, info, np.array(info.get("z_mean", [0.0] * latent), np.float32),
                      np.array(info.get("z_std", [1.0] * latent), np.float32))


def predict(run: Run, data, head: FittedHead | None = None) -> tuple[list[str], np.ndarray]:
    """``(texts, properties (N, P))`` predicted from the encodings of ``data`` (invalid or
    unencodable lines are left out with a note on stderr)."""
    from seqvae import inference

    head = head or load_head(run)
    encoded = inference.encode_ids(run, data)
    means, _ = inference.encode_batches(run, encoded.ids)
    return encoded.texts, head.predict(means)


def print_metrics(metrics: dict, file=None) -> None:
    """A table: property, R², MAE, molecules (to ``file``, default: the current stdout)."""
    file = file or sys.stdout  # looked up per call: a default bound at import misses redirection
    print(f"{'property':<12} {'R2':>7} {'MAE':>9} {'n':>7}", file=file)
    for name, m in metrics.items():
        print(f"{name:<12} {m['r2']:>7.3f} {m['mae']:>9.4f} {m['n']:>7}", file=file)
