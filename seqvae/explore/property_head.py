"""The hook through which the explorer finds a run's property head (the optimisation issue).

The explorer shows a "predicted" colour and an Optimise panel only when ``find_property_head``
returns an object with the ``PropertyHead`` interface; today no run has one, so it returns None
and both stay hidden. The property-head work plugs in here, by setting ``run.property_head`` when
``load_run`` finds a trained head in the run directory, or by changing this one function.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from seqvae.training.rundir import Run


@runtime_checkable
class PropertyHead(Protocol):
    """What the explorer needs from a property head.

    Attributes:
        name: what it predicts, shown in the page (e.g. ``"logP"``).
    """

    name: str

    def predict(self, z: np.ndarray) -> np.ndarray:
        """``z (N, latent_dim)`` -> float ``(N,)`` predicted property."""

    def optimise(self, z: np.ndarray, steps: int) -> np.ndarray:
        """A trajectory from ``z (latent_dim,)`` towards a better property: float
        ``(steps + 1, latent_dim)``, the start first."""


def find_property_head(run: Run) -> PropertyHead | None:
    """The run's property head, or None when it has none (or the object lacks the interface)."""
    head = getattr(run, "property_head", None)
    return head if isinstance(head, PropertyHead) else None
