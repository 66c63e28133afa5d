"""seqvae: variational autoencoders over token sequences on TensorFlow 2 + Keras 3.

Layers, each importing only from the layers above it in this list (``tests/test_layers.py``
checks it):

- ``errors``, ``files``, ``parallel``, ``runtime``: the error users see, atomic files, worker
  processes, the process settings the command line applies (``runtime.tune_process``).
- ``config``: the frozen configuration and its presets.
- ``data``: sources (files, MOSES, lists, arrays), tokenizers, the vocabulary, chemistry,
  preparation (the one path from texts to ids), batching, streaming, graph tokenization.
- ``model``: GRU, encoder, decoder, the VAE, likelihood terms, decoding loops, randomness,
  the SMILES grammar, precision.
- ``checkpoints``, ``latent_prior``, then ``run``: what a run directory holds and how it is read.
- ``training`` (the objective, schedules, the loop and its hooks, distribution, the gradient
  doctor) and, beside it, ``inference`` (sample, encode, decode, reconstruct, interpolate);
  neither imports the other.
- ``property_fit``, ``export`` and ``warm_start`` (a run started from another's weights); then
  ``evaluation`` (MOSES metrics, VAE quality, the report) and ``optimize``; then ``explore``.
- ``workflows`` (train then keep the prior and export; the demo) and ``cli`` (argument parsing
  only) on top.

Importing seqvae changes nothing in the process; the command line tunes it for TensorFlow on
CPUs first (``seqvae.runtime``).
"""

__version__ = "0.1.0"
