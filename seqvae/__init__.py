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


def _keep_freed_heap_memory() -> None:
    """Has glibc keep freed heap memory for the next allocation instead of giving it back.

    Where oneDNN does not take TensorFlow's CPU matrix products (AMD CPUs without AVX-512, for
    one), Eigen computes them and allocates its packing buffers with glibc malloc, not the BFC
    allocator; glibc hands the freed top of the heap back to the kernel, and the next product
    faults it in again, page by page. On a 2-core AMD EPYC the demo spent 26% of its CPU time in
    the kernel (9.3 million page faults in 60 steps); with these settings 5% (286,000) and 50%
    more molecules a second, the same losses (``bench/kernel_time.py --only TF,mallopt``).
    Values set through glibc's own ``MALLOC_*_`` variables are left alone; ``SEQVAE_MALLOPT=0``
    turns this off. Nothing happens on a libc without ``mallopt`` (macOS).
    """
    if _os.environ.get("SEQVAE_MALLOPT") == "0" or any(
            name.startswith("MALLOC_") for name in _os.environ):
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    trim_threshold, top_pad, mmap_threshold = -1, -2, -3  # glibc's M_* parameter numbers
    mallopt(trim_threshold, 1 << 30)
    mallopt(top_pad, 64 << 20)
    if not mallopt(mmap_threshold, 256 << 20):  # above glibc's maximum on some builds
        mallopt(mmap_threshold, 32 << 20)


_keep_freed_heap_memory()


def _one_thread_per_op() -> None:
    """On two cores or fewer, has TensorFlow run each op on one thread (``TF_NUM_INTRAOP_THREADS=1``).

    A training step of seqvae's decoder is a loop of small ops (batch 128: a few hundred KiB
    each). Split over two threads, every op hands its halves to TensorFlow's thread pool and
    waits for them: about 8,600 futex calls a step, and on a 2-core Intel Xeon (family 6 model
    167, KVM) 11% of the CPU time in the kernel. With one thread per op, independent ops still
    run side by side (the inter-op pool keeps one thread per core): the demo model trained 498
    against 362 sequences/s, system time 3% against 11%; sampling the same (the same samples),
    ``seqvae encode`` 4% faster (the same means), as the encoder's chain leaves the other core to
    RDKit (``bench/kernel_time.py``; ``bench/README.md``). Measured on that CPU only. A value the
    user sets is left alone (``TF_NUM_INTRAOP_THREADS=2`` restores TensorFlow's default there).
    """
    from seqvae.parallel import worker_count  # os only: TensorFlow is not imported yet

    if "TF_NUM_INTRAOP_THREADS" not in _os.environ and worker_count() <= 2:
        _os.environ["TF_NUM_INTRAOP_THREADS"] = "1"


_one_thread_per_op()
