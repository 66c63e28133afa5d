"""The hook through which the explorer finds a run's property head.

The explorer shows a "predicted" colour and an Optimise panel only when ``find_property_head``
returns an object with the ``PropertyHead`` interface: ``run.property_head`` when a caller set
one, else the run's own head (``seqvae fit-properties`` or ``train --properties``), seen through
``FittedHeadView``; without a head both stay hidden.
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


# The property the explorer shows and climbs, the first of these the head predicts (else its
# first): the benchmark's objectives before plain logP.
PREFERRED = ("plogp", "qed", "logp")


class FittedHeadView:
    """A run's fitted or jointly trained head (``property_fit.FittedHead``) as the explorer's
    ``PropertyHead``: one property, climbed by ``seqvae optimize``'s normalised gradient steps."""

    def __init__(self, head, name: str | None = None):
        self.head = head
        self.name = name or next((n for n in PREFERRED if n in head.names), head.names[0])
        self.index = head.index(self.name)

    def predict(self, z: np.ndarray) -> np.ndarray:
        return self.head.predict(np.asarray(z, np.float32))[:, self.index]

    def optimise(self, z: np.ndarray, steps: int) -> np.ndarray:
        from seqvae.optimize import OptimizeSettings, ascent_paths

        settings = OptimizeSettings(similarity=0.0, steps=steps, restarts=1)
        path = ascent_paths(lambda batch: self.head.output(batch)[:, self.index],
                            np.asarray(z, np.float32).reshape(1, -1), settings)
        return path[0, 0]  # (steps + 1, L)


def find_property_head(run: Run) -> PropertyHead | None:
    """The run's property head, or None when it has none (or the object lacks the interface)."""
    head = getattr(run, "property_head", None)
    if head is None:
        from seqvae.training.property_fit import has_head, load_head

        head = FittedHeadView(load_head(run)) if has_head(run) else None
    return head if isinstance(head, PropertyHead) else None
