"""The model: GRU layer, encoder, decoder, the sequence VAE, graph-native decoding loops and the
counter-based randomness that makes eager, ``tf.function`` and XLA agree."""

from seqvae.model.vae import SequenceVAE, precision_policy

__all__ = ["SequenceVAE", "precision_policy"]
