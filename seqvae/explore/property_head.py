"""The explorer's view of a run's property head (``seqvae fit-properties``, or trained jointly
with ``train --properties``): a "predicted" map colour per property and the Optimise panel.

``find_property_head`` is the one place the explorer looks for a head; the climb itself is
``seqvae.optimize.ascent_paths`` (one path, no restarts), as ``seqvae optimize`` takes it.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from seqvae.errors import SeqvaeError
from seqvae.run import Run
from seqvae.messages import note

# The property the Optimise panel starts with: the first of these the head predicts (else its
# first), the benchmark's objectives before plain logP.
PREFERRED = ("plogp", "qed", "logp")


@runtime_checkable
class PropertyHead(Protocol):
    """What the explorer needs from a property head.

    Attributes:
        names: the properties it predicts, as shown in the page (e.g. ``("logp", "qed")``).
    """

    names: tuple[str, ...]

    def predict(self, z: np.ndarray) -> np.ndarray:
        """``z (N, latent_dim)`` -> float ``(N, len(names))`` predicted properties."""

    def optimise(self, z: np.ndarray, name: str, steps: int, minimize: bool = False) -> np.ndarray:
        """A trajectory from ``z (latent_dim,)`` towards a higher (``minimize``: lower)
        prediction of ``name``: float ``(steps + 1, latent_dim)``, the start first."""


def default_objective(names: Sequence[str]) -> str:
    """The property the Optimise panel starts with (``PREFERRED``, else the first)."""
    return next((name for name in PREFERRED if name in names), names[0])


class FittedPropertyHead:
    """``PropertyHead`` of a ``seqvae.property_fit.FittedHead``: normalised gradient
    steps of ``step_size`` on its prediction, never farther than ``trust_radius`` from the start
    (``seqvae optimize``'s defaults). The gradient is compiled once for all properties and both
    directions (the chosen one is a weight vector), so it is traced once, at start-up."""

    def __init__(self, fitted, step_size: float = 0.25, trust_radius: float = 2.0):
        self.fitted, self.names = fitted, tuple(fitted.names)
        self.step_size, self.trust_radius = step_size, trust_radius
        self._gradient = None  # z (B, L), weights (P,) -> d sum(output . weights) / dz

    def predict(self, z: np.ndarray) -> np.ndarray:
        return self.fitted.predict(np.asarray(z, np.float32))

    def optimise(self, z: np.ndarray, name: str, steps: int, minimize: bool = False) -> np.ndarray:
        import tensorflow as tf

        from seqvae.optimize import OptimizeSettings, ascent_paths, gradient_of

        if self._gradient is None:  # one compiled gradient for every property and direction
            self._gradient = gradient_of(
                lambda batch, weights: tf.linalg.matvec(self.fitted.output(batch), weights))
        weights = np.zeros(len(self.names), np.float32)
        weights[self.fitted.index(name)] = -1.0 if minimize else 1.0
        weights = tf.constant(weights)
        settings = OptimizeSettings(similarity=0.0, steps=steps, restarts=1,
                                    step_size=self.step_size, trust_radius=self.trust_radius)
        z0 = np.asarray(z, np.float32).reshape(1, -1)
        return ascent_paths(None, z0, settings,
                            lambda batch: self._gradient(batch, weights))[0, 0]  # (steps + 1, L)


def find_property_head(run: Run) -> PropertyHead | None:
    """The run's property head: ``run.property_head`` when set (a caller's own ``PropertyHead``),
    else the head in ``RUN/property_head/`` or the one trained jointly; None when there is none.
    A head that cannot be read is left out with a note on stderr: the rest of the page works
    without it."""
    head = getattr(run, "property_head", None)
    if head is not None:
        return head if isinstance(head, PropertyHead) else None
    from seqvae.property_fit import has_head, load_head

    if not has_head(run):
        return None
    try:
        return FittedPropertyHead(load_head(run))
    except SeqvaeError as error:
        note(f"seqvae explore: no Optimise panel: {error}")
        return None
