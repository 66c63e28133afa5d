"""The MOSES benchmark data inside the installed ``molsets`` wheel, located by file path.

``moses`` itself is never imported: its ``__init__`` imports torch. molsets must be installed
with ``--no-deps`` (its own requirements pull in torch), which seqvae's pyproject cannot say, so
``scripts/setup.sh`` installs it and every error here says how.
"""

from __future__ import annotations

import gzip
import os

from seqvae.errors import SeqvaeError

MOSES_SPLITS = ("train", "test", "test_scaffolds")
MOSES_HINT = "pip install --no-deps molsets==0.3.1"


def is_moses(source) -> bool:
    """Whether ``source`` names a MOSES split (``moses:train``, ``moses:test``, ...)."""
    return isinstance(source, str) and source.startswith("moses:")


def moses_package_dir() -> str:
    """Directory of the installed ``moses`` package (from molsets), found without importing it.

    Raises:
        SeqvaeError: molsets is not installed.
    """
    import importlib.metadata
    import importlib.util

    try:
        spec = importlib.util.find_spec("moses")  # a top-level spec: moses/__init__ does not run
    except (ImportError, ValueError):  # ValueError: a "moses" in sys.modules without a spec
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    try:
        path = str(importlib.metadata.distribution("molsets").locate_file("moses"))
    except importlib.metadata.PackageNotFoundError:
        path = ""
    if path and os.path.isdir(path):
        return path
    raise SeqvaeError(f"the MOSES data (molsets package) is not installed; {MOSES_HINT}")


def moses_file(*parts: str) -> str:
    """Path of a file inside the installed ``moses`` package, e.g. ``("metrics", "mcf.csv")``.

    Raises:
        SeqvaeError: molsets is not installed, or the file is missing from it.
    """
    path = os.path.join(moses_package_dir(), *parts)
    if not os.path.exists(path):
        raise SeqvaeError(f"{path} is missing from the molsets package; {MOSES_HINT}")
    return path


def moses_split_file(split: str) -> str:
    """Path of a MOSES split's ``.csv.gz``: ``train``, ``test`` or ``test_scaffolds``."""
    if split not in MOSES_SPLITS:
        raise SeqvaeError(f"unknown MOSES split {split[:80]!r} "  # repr: one line whatever it holds
                          f"(choose {', '.join(MOSES_SPLITS)})")
    return moses_file("dataset", "data", f"{split}.csv.gz")


def read_split(split: str) -> tuple[list[str], list[int]]:
    """The SMILES of a MOSES split and the file line of each, in file order.

    MOSES's split files hold one unquoted ``SMILES`` column, so they are read as plain lines: the
    1.58 M lines of ``train`` in about a second, several times faster than a CSV reader.

    Raises:
        SeqvaeError: molsets is not installed, or the file is not a MOSES split.
    """
    path = moses_split_file(split)
    try:
        with gzip.open(path, "rb") as handle:
            lines = handle.read().decode("utf-8").split("\n")
    except (OSError, EOFError, UnicodeDecodeError) as error:
        raise SeqvaeError(f"{path}: cannot read ({error}); reinstall molsets: {MOSES_HINT}") from None
    if lines[0].strip() != "SMILES" or any("," in line or '"' in line for line in lines[1:2]):
        raise SeqvaeError(f"{path}:1: not a MOSES split (expected one SMILES column); "
                          f"reinstall molsets: {MOSES_HINT}")
    texts, numbers = [], []
    for number, line in enumerate(lines[1:], start=2):
        line = line.strip()
        if line:
            texts.append(line)
            numbers.append(number)
    return texts, numbers
