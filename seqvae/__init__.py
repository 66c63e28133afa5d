"""seqvae: variational autoencoders over token sequences on TensorFlow 2 + Keras 3.

Layers, each importing only from the layers above it in this list:

- ``errors``, ``config``, ``files``: the error users see, the frozen configuration, atomic files.
- ``data``: sources (files, MOSES, lists, arrays), tokenizers, the vocabulary, chemistry,
  preparation (the one path from texts to ids), batching, streaming, graph tokenization.
- ``model``: GRU, encoder, decoder, the VAE, decoding loops, randomness.
- ``training``: the objective, schedules, the loop and its inputs, distribution, the run
  directory, the gradient doctor.
- ``inference``: sample, encode, decode, reconstruct, interpolate with a trained run.
- ``evaluation``: MOSES metrics, VAE quality, reconstruction, the report and its plots.
- ``export`` (SavedModel) and ``cli`` (argument parsing only) on top.
"""

__version__ = "0.1.0"
