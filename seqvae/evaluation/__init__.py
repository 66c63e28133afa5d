"""Evaluation of a trained run: MOSES metrics, the VAE's likelihood and latent statistics,
reconstruction, and the report."""
