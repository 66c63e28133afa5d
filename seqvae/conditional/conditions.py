"""Property conditions (``--where "logp=2.5±0.5"``): parsing them, and checking molecules
against them and a substructure, with RDKit on each molecule's canonical SMILES.

A condition names a property and an interval:

- ``logp>=3``, ``qed>0.8``, ``sa<=3.5``, ``mw<400`` (``≥`` and ``≤`` too);
- ``logp=2.5±0.5`` (or ``+-``, ``+/-``): ``2.0 <= logp <= 3.0``;
- ``logp=2..3``: ``2 <= logp <= 3``.

Properties are those RDKit computes (``seqvae.data.properties``: logp, qed, sa, plogp, mw),
measured on every molecule, and ``col:NAME``, a column the run's property head was fitted on:
RDKit has no function for it, so its value is the head's prediction from the molecule's own
encoding (``Checker``'s ``predict_columns``), and says so wherever it is reported.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from seqvae.data import chemistry
from seqvae.data import properties as props
from seqvae.errors import SeqvaeError

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_NAME = r"[A-Za-z_][\w]*(?::[^<>=≥≤\s]+)?"
_COMPARISON = re.compile(rf"\s*({_NAME})\s*(>=|<=|>|<|≥|≤)\s*({_NUMBER})\s*")
_TOLERANCE = re.compile(rf"\s*({_NAME})\s*==?\s*({_NUMBER})\s*(?:±|\+-|\+/-)\s*({_NUMBER})\s*")
_RANGE = re.compile(rf"\s*({_NAME})\s*==?\s*({_NUMBER})\s*\.\.\s*({_NUMBER})\s*")
_EXACT = re.compile(rf"\s*({_NAME})\s*==?\s*({_NUMBER})\s*")
EXAMPLES = "logp=2.5±0.5, logp=2..3, qed>=0.7, sa<4 or col:NAME>=-3"
# The order properties are computed in, cheapest first (a molecule that fails one is not
# computed further): QED and penalized logP (its SA score and cycle basis) cost the most.
_COST_ORDER = ("mw", "logp", "sa", "qed", "plogp")


@dataclass(frozen=True)
class Condition:
    """``low <= value <= high`` of one property (a strict end with ``>`` or ``<``).

    Attributes:
      name: ``logp``, ``qed``, ``sa``, ``plogp``, ``mw`` or ``col:NAME``.
      low, high: the interval's ends (``-inf`` / ``inf`` where open).
      strict_low, strict_high: ``>`` / ``<`` instead of ``>=`` / ``<=``.
      text: the condition as written.
    """

    name: str
    low: float = -math.inf
    high: float = math.inf
    strict_low: bool = False
    strict_high: bool = False
    text: str = ""

    @property
    def measured(self) -> bool:
        """Whether RDKit computes the property (else the head predicts it: ``col:``)."""
        return self.name in props.RDKIT_PROPERTIES

    def holds(self, values: np.ndarray) -> np.ndarray:
        """bool ``(N,)``: which of ``values (N,)`` lie in the interval (NaN never does)."""
        values = np.asarray(values, np.float64)
        above = values > self.low if self.strict_low else values >= self.low
        below = values < self.high if self.strict_high else values <= self.high
        return above & below & ~np.isnan(values)

    def distance(self, values: np.ndarray) -> np.ndarray:
        """float ``(N,)``: how far each value lies outside the interval (0 inside, inf for NaN)."""
        values = np.asarray(values, np.float64)
        outside = np.maximum(self.low - values, 0.0) + np.maximum(values - self.high, 0.0)
        return np.where(np.isnan(values), np.inf, outside)

    def depth(self, values: np.ndarray) -> np.ndarray:
        """float ``(N,)``: how far each value lies inside the interval, from its nearer end (0
        on an end or outside, inf inside an interval open both ways)."""
        values = np.asarray(values, np.float64)
        inside = np.minimum(values - self.low, self.high - values)
        return np.where(np.isnan(values), 0.0, np.maximum(inside, 0.0))

    def __str__(self) -> str:
        if math.isinf(self.low):
            return f"{self.name} {'<' if self.strict_high else '<='} {self.high:g}"
        if math.isinf(self.high):
            return f"{self.name} {'>' if self.strict_low else '>='} {self.low:g}"
        return (f"{self.low:g} {'<' if self.strict_low else '<='} {self.name} "
                f"{'<' if self.strict_high else '<='} {self.high:g}")


def parse_condition(text: str) -> Condition:
    """One ``--where`` condition (see the module docstring).

    Raises:
      SeqvaeError: one line for an unparsable condition, an unknown property, an empty
        interval or a tolerance that is not positive.
    """
    for pattern, build in ((_TOLERANCE, _around), (_RANGE, _between), (_COMPARISON, _compared)):
        match = pattern.fullmatch(text)
        if match:
            name = match.group(1)
            _check_name(name, text)
            condition = build(name, match.group(2), match.group(3), text)
            if condition.low > condition.high or (condition.low == condition.high and (
                    condition.strict_low or condition.strict_high)):
                raise SeqvaeError(f"--where {text!r}: no value satisfies it (empty interval)")
            return condition
    if _EXACT.fullmatch(text):
        raise SeqvaeError(f"--where {text!r}: a property is never exactly one number; give a "
                          f"tolerance or a range, e.g. {text.strip()}±0.5 or LOW..HIGH")
    raise SeqvaeError(f"--where {text!r}: not a condition; write e.g. {EXAMPLES}")


def parse_conditions(texts: Sequence[str] | str) -> tuple[Condition, ...]:
    """Conditions from ``--where`` texts (one each; a single text may hold several separated by
    commas or ``and``, as the explorer's box takes them)."""
    if isinstance(texts, str):
        texts = [texts]
    parts = [part for text in texts for part in re.split(r",|\band\b", text) if part.strip()]
    return tuple(parse_condition(part) for part in parts)


def _check_name(name: str, text: str) -> None:
    if name in props.RDKIT_PROPERTIES or (name.startswith(props.COLUMN_PREFIX)
                                          and len(name) > len(props.COLUMN_PREFIX)):
        return
    raise SeqvaeError(f"--where {text!r}: unknown property {name!r}; choose from "
                      f"{', '.join(props.RDKIT_PROPERTIES)} or col:NAME (a column the run's "
                      "property head was fitted on)")


def _around(name: str, centre: str, tolerance: str, text: str) -> Condition:
    if not float(tolerance) > 0:
        raise SeqvaeError(f"--where {text!r}: the tolerance must be > 0")
    return Condition(name, float(centre) - float(tolerance), float(centre) + float(tolerance),
                     text=text.strip())


def _between(name: str, low: str, high: str, text: str) -> Condition:
    return Condition(name, float(low), float(high), text=text.strip())


def _compared(name: str, operator: str, bound: str, text: str) -> Condition:
    value = float(bound)
    if operator in (">=", ">", "≥"):
        return Condition(name, low=value, strict_low=operator == ">", text=text.strip())
    return Condition(name, high=value, strict_high=operator == "<", text=text.strip())


def describe(conditions: Sequence[Condition]) -> str:
    """The conditions in words: ``2 <= logp <= 3 and qed >= 0.7``."""
    return " and ".join(str(condition) for condition in conditions)


class Substructure(Protocol):
    """What the check needs of a scaffold (``seqvae.conditional.scaffolds.Scaffold``)."""

    def contained_in(self, mol) -> bool:
        """Whether the molecule (an RDKit ``Mol``) holds the substructure."""


@dataclass
class Checked:
    """Molecules as checked: their canonical SMILES (None: invalid), the values of the
    conditions' properties ``(N, P)`` in ``Checker.names`` order (NaN where not computed), and
    whether each satisfies every condition and holds the substructure."""

    canonical: list[str | None]
    values: np.ndarray
    ok: np.ndarray  # bool (N,)


class Checker:
    """Checks molecules against conditions and a substructure, by RDKit on the molecule.

    Args:
      conditions: the property conditions.
      substructure: a scaffold every molecule must contain (None: no such condition).
      predict_columns: ``texts -> (N, C)`` the property head's predictions of the ``col:``
        properties (``column_names`` order) from each molecule's encoding; needed when a
        condition names a column.
    """

    def __init__(self, conditions: Sequence[Condition], substructure: Substructure | None = None,
                 predict_columns: Callable[[list[str]], np.ndarray] | None = None):
        self.conditions, self.substructure = tuple(conditions), substructure
        self.names = tuple(dict.fromkeys(condition.name for condition in self.conditions))
        self.column_names = tuple(n for n in self.names if n.startswith(props.COLUMN_PREFIX))
        if self.column_names and predict_columns is None:
            raise SeqvaeError(f"{', '.join(self.column_names)}: a column property needs the "
                              "run's property head fitted on it")
        self._functions = {name: props.rdkit_property(name) for name in self.names
                           if name not in self.column_names}
        self._predict_columns = predict_columns

    def check(self, texts: Sequence[str]) -> Checked:
        """The checks of ``texts`` (SMILES as decoded): ``Checked``, rows in input order. The
        cheap checks come first: a property is computed only for molecules that passed the
        conditions before it (its value NaN for the others)."""
        from rdkit import rdBase

        count = len(texts)
        values = np.full((count, len(self.names)), np.nan)
        canonical: list[str | None] = [None] * count
        ok = np.zeros(count, bool)
        with rdBase.BlockLogs():
            mols = [chemistry.to_mol(text) for text in texts]
            for row, mol in enumerate(mols):
                if mol is None:
                    continue
                canonical[row] = chemistry.canonical_smiles(mol)
                ok[row] = self.substructure is None or self.substructure.contained_in(mol)
            for name in sorted(self._functions, key=_COST_ORDER.index):
                j = self.names.index(name)
                for row in np.flatnonzero(ok):
                    try:
                        values[row, j] = self._functions[name](mols[row])
                    except (ValueError, RuntimeError, ZeroDivisionError, SeqvaeError):
                        values[row, j] = np.nan
                ok &= self._holds(name, values[:, j])
        if self.column_names and ok.any():
            rows = np.flatnonzero(ok)
            predicted = self._predict_columns([canonical[row] for row in rows])
            for k, name in enumerate(self.column_names):
                j = self.names.index(name)
                values[rows, j] = predicted[:, k]
                ok &= self._holds(name, values[:, j])
        return Checked(canonical, values, ok)

    def _holds(self, name: str, column: np.ndarray) -> np.ndarray:
        held = np.ones(len(column), bool)
        for condition in self.conditions:
            if condition.name == name:
                held &= condition.holds(column)
        return held
