"""Training: the objective and schedules (pure functions), the custom loop, its inputs,
``tf.distribute``, the run directory and the gradient doctor."""

from seqvae.training.loop import train
from seqvae.training.rundir import load_run

__all__ = ["train", "load_run"]
