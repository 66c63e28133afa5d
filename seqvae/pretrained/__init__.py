"""Models that ship inside seqvae, named ``pretrained:NAME`` wherever a run directory is taken.

Each is a folder ``seqvae/pretrained/NAME/`` holding what a consumer of a run needs, and nothing
only a trainer needs::

    seqvae/pretrained/NAME/
      MANIFEST.json     what it is: the data it was trained on, the command, the CPU and the
                        time, the metrics it reached, and the sha256 and size of every other file
      run.json, config.json, vocab.json, metrics.jsonl (the training log: a report's curves)
      checkpoints/      one model-only checkpoint (``tf.train.Checkpoint(model=...)``, no
                        optimizer state), float32 or float16 (restored as float32)
      latent_prior.npz  the run's prior (an aggregate posterior may keep fewer kernels, float16)
      property_head/    the fitted property head, when the run has one

``scripts/ship_pretrained.py RUN_DIR NAME`` makes one from a finished run. A shipped model is
read-only: what commands write beside a run goes to the user's cache
(``cache_folder``: ``pretrained/NAME/`` under ``seqvae.files.user_cache_dir``), and commands that
would change the run refuse (``seqvae.run.Run.check_writable``). Its files are checked against
the manifest the first time a process reads them, and again when they change, so a damaged
installation is one line, not wrong molecules.

``$SEQVAE_PRETRAINED_DIR`` replaces the package's folder as the place models are looked up in.
"""

from __future__ import annotations

import hashlib
import json
import os

from seqvae.errors import SeqvaeError
from seqvae.files import user_cache_dir, write_json_atomic

PREFIX = "pretrained:"
ROOT_ENV = "SEQVAE_PRETRAINED_DIR"
MANIFEST = "MANIFEST.json"
FORMAT = "seqvae-pretrained-1"
REINSTALL = "reinstall seqvae (pip install --force-reinstall --no-deps seqvae)"
# The metrics a listing shows, in MOSES's table order, when the manifest has them (the full
# view shows all).
HEADLINE = ("valid", "unique@1000", "unique@10000", "FCD/Test", "SNN/Test", "Frag/Test",
            "Scaf/Test", "IntDiv", "Filters", "Novelty")
_verified: dict[str, tuple] = {}  # folder -> (size, mtime) of its files when their sums matched


def root() -> str:
    """The folder shipped models are looked up in: ``$SEQVAE_PRETRAINED_DIR``, else this
    package's own folder."""
    given = os.environ.get(ROOT_ENV)
    return os.path.abspath(os.path.expanduser(given)) if given else os.path.dirname(
        os.path.abspath(__file__))


def is_pretrained_name(text) -> bool:
    """Whether ``text`` names a shipped model (``pretrained:NAME``) rather than a folder."""
    return isinstance(text, str) and text.startswith(PREFIX)


def names() -> list[str]:
    """The names of the models that ship (folders of ``root()`` with a manifest), sorted."""
    folder = root()
    if not os.path.isdir(folder):
        return []
    return sorted(name for name in os.listdir(folder) if not name.startswith((".", "_"))
                  and os.path.isfile(os.path.join(folder, name, MANIFEST)))


def resolve(spec: str) -> str:
    """The folder of ``pretrained:NAME``; a one-line error naming the models that ship when
    there is no such model."""
    name = spec[len(PREFIX):]
    folder = os.path.join(root(), name)
    if (not name or name.startswith((".", "_")) or os.sep in name or "/" in name
            or not os.path.isfile(os.path.join(folder, MANIFEST))):
        shipped = names()
        known = (f"the models that ship are {', '.join(PREFIX + n for n in shipped)}" if shipped
                 else "no pretrained model ships with this installation of seqvae")
        raise SeqvaeError(f"{spec}: no such pretrained model; {known} (seqvae pretrained "
                          "lists them)")
    return folder


def name_of(run_dir: str) -> str | None:
    """The name of the shipped model whose folder ``run_dir`` is (also reached by its path, as a
    fine-tuned run records its base), else None."""
    real = os.path.realpath(run_dir)
    if (os.path.dirname(real) == os.path.realpath(root())
            and not os.path.basename(real).startswith((".", "_"))
            and os.path.isfile(os.path.join(real, MANIFEST))):
        return os.path.basename(real)
    return None


def cache_folder(name: str, *parts: str) -> str:
    """Where commands write what they would write beside the run of the shipped model ``name``
    (a report, property and explorer caches): ``USER_CACHE/pretrained/NAME/PARTS`` (not
    created here)."""
    return os.path.join(user_cache_dir(), "pretrained", name, *parts)


def read_manifest(folder: str) -> dict:
    """``MANIFEST.json`` of a shipped model's folder; a one-line error when it is unreadable."""
    path = os.path.join(folder, MANIFEST)
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, ValueError) as error:
        raise SeqvaeError(f"{path}: cannot be read ({getattr(error, 'strerror', None) or error}); "
                          f"{REINSTALL}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(
            manifest.get("files"), dict):
        raise SeqvaeError(f"{path}: not a seqvae pretrained-model manifest ({FORMAT}); "
                          f"{REINSTALL}")
    return manifest


def file_sha256(path: str) -> str:
    """The sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _stats(folder: str, listed) -> tuple:
    found = []
    for name in sorted(listed):
        try:
            stat = os.stat(os.path.join(folder, name))
            found.append((name, stat.st_size, stat.st_mtime_ns))
        except OSError:
            found.append((name, None, None))
    return tuple(found)


def verify(folder: str) -> dict:
    """Checks every file ``MANIFEST.json`` lists against its size and sha256, once per process
    (again when a file changes); returns the manifest.

    Raises:
      SeqvaeError: a file is missing or differs from the manifest (one line: which file, and
        to reinstall).
    """
    manifest = read_manifest(folder)
    key = os.path.realpath(folder)
    stats = _stats(folder, manifest["files"])
    if _verified.get(key) == stats:
        return manifest
    for name, entry in sorted(manifest["files"].items()):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise SeqvaeError(f"{path}: missing from the pretrained model (MANIFEST.json lists "
                              f"it); {REINSTALL}")
        if os.path.getsize(path) != entry.get("bytes") or file_sha256(path) != entry.get("sha256"):
            raise SeqvaeError(f"{path}: damaged (its sha256 differs from MANIFEST.json's); "
                              f"{REINSTALL}")
    _verified[key] = stats
    return manifest


def folder_files(folder: str) -> dict[str, dict]:
    """``{relative path: {"sha256", "bytes"}}`` of every file under ``folder`` but the manifest
    (what ``write_manifest`` records)."""
    found = {}
    for parent, subfolders, files in os.walk(folder):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        for name in sorted(files):
            path = os.path.join(parent, name)
            relative = os.path.relpath(path, folder).replace(os.sep, "/")
            if relative != MANIFEST:
                found[relative] = {"sha256": file_sha256(path), "bytes": os.path.getsize(path)}
    return found


def write_manifest(folder: str, info: dict) -> dict:
    """Writes ``folder/MANIFEST.json``: ``info`` with the format and every file's sum and size."""
    manifest = {**info, "format": FORMAT, "files": folder_files(folder)}
    write_json_atomic(os.path.join(folder, MANIFEST), manifest)
    return manifest


def available() -> list[dict]:
    """What ships: each model's manifest with its ``name``, ``folder`` and ``size_bytes`` (all
    its files), sorted by name. The sums are not checked here (``verify`` does, on load)."""
    found = []
    for name in names():
        folder = os.path.join(root(), name)
        manifest = read_manifest(folder)
        size = sum(int(entry.get("bytes", 0)) for entry in manifest["files"].values())
        found.append({**manifest, "name": name, "folder": folder, "size_bytes": size})
    return found


def _size(size: int) -> str:
    if size >= 1e6:
        return f"{size / 1e6:.1f} MB"
    return f"{size / 1e3:.1f} kB" if size >= 1e3 else f"{size} B"


def _value(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _metrics_line(metrics: dict) -> str:
    names = [name for name in HEADLINE if name in metrics] or list(metrics)
    shown = [f"{name} {_value(metrics[name])}" for name in names]
    return " · ".join(shown) if shown else "(none recorded)"


def _training_line(entry: dict) -> str:
    training = entry.get("training") or {}
    parts = []
    if training.get("steps"):
        parts.append(f"{training['steps']:,} steps")
    if training.get("seconds"):
        parts.append(f"{training['seconds'] / 3600:.1f} h")
    if training.get("cpu"):
        parts.append(f"on {training['cpu']}")
    return " ".join(parts) or "(not recorded)"


def summary_lines(entry: dict) -> list[str]:
    """A shipped model (an entry of ``available()``) in a few lines: name, data, size, metrics,
    the command that trained it and where."""
    return [f"{PREFIX}{entry['name']}  trained on {entry.get('trained_on', '?')}  "
            f"{_size(entry['size_bytes'])}",
            f"  metrics: {_metrics_line(entry.get('metrics') or {})}",
            f"  trained by: {entry.get('command', '?')}",
            f"  training: {_training_line(entry)}"]


def detail_lines(entry: dict) -> list[str]:
    """Everything the manifest of one shipped model says, and where its files and the files
    written for it are."""
    lines = summary_lines(entry)[:1]
    if entry.get("description"):
        lines.append(f"  {entry['description']}")
    weights, prior = entry.get("weights") or {}, entry.get("prior")
    lines += [f"  command: {entry.get('command', '?')}",
              f"  training: {_training_line(entry)}",
              f"  weights: {weights.get('checkpoint', '?')} ({weights.get('dtype', 'float32')}, "
              "model only)"]
    if prior:
        kept = (f", {prior['kernels']:,} of {prior['of']:,} kernels kept"
                if prior.get("kernels") and prior.get("of") and prior["kernels"] < prior["of"]
                else "")
        lines.append(f"  prior: {prior.get('kind', '?')} ({prior.get('dtype', 'float32')}{kept})")
    lines.append("  metrics:" + ("" if entry.get("metrics") else " (none recorded)"))
    lines += [f"    {name}: {_value(value)}"
              for name, value in (entry.get("metrics") or {}).items()]
    if entry.get("metrics_command"):
        lines.append(f"    measured by: {entry['metrics_command']}")
    lines.append(f"  seqvae version: {entry.get('seqvae_version', '?')}")
    lines.append(f"  files ({_size(entry['size_bytes'])}) in {entry['folder']}:")
    lines += [f"    {name}  {_size(item.get('bytes', 0))}  sha256 {item.get('sha256', '?')[:16]}"
              for name, item in sorted(entry["files"].items())]
    lines.append(f"  written for it (reports, caches): {cache_folder(entry['name'])}")
    return lines


def find(name: str) -> dict:
    """The entry of ``available()`` for ``name`` (with or without ``pretrained:``)."""
    name = name[len(PREFIX):] if is_pretrained_name(name) else name
    resolve(PREFIX + name)  # its one-line error when there is no such model
    return next(entry for entry in available() if entry["name"] == name)
