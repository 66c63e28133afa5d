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

import os as _os

__version__ = "0.1.0"

# TensorFlow's CPU tensors come from glibc malloc by default, which returns each large freed buffer
# to the kernel; every training step then faults its activations back in page by page (zeroed by
# the kernel), and a quarter of the demo's CPU time was system time. TensorFlow's own BFC
# allocator keeps freed blocks for the next step: the same steps, a fraction of the page faults
# (bench/kernel_time.py). Read when TensorFlow makes its first CPU tensor, so it is set here,
# before any seqvae module imports TensorFlow; TF_CPU_ALLOCATOR_USE_BFC=false restores glibc.
_os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
