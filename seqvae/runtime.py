"""Process settings that make seqvae's TensorFlow work fast on CPUs, applied on request.

``seqvae`` (the command line) applies them before TensorFlow is imported; a library user calls
``tune_process()`` first thing, or leaves the process as it is. Each setting a user has already
made is kept. ``SEQVAE_TUNE=0`` turns all of them off for the command line too.
"""

from __future__ import annotations

import os


def tune_process() -> list[str]:
    """Applies ``bfc_allocator``, ``keep_freed_heap_memory`` and ``one_thread_per_op``; they
    take effect only if TensorFlow has not made a CPU tensor yet (import it after this).

    Returns:
      The settings applied, by name (empty with ``SEQVAE_TUNE=0``).
    """
    if os.environ.get("SEQVAE_TUNE") == "0":
        return []
    return [step.__name__ for step in (bfc_allocator, keep_freed_heap_memory, one_thread_per_op)
            if step()]


def bfc_allocator() -> bool:
    """TensorFlow's BFC allocator for CPU tensors (``TF_CPU_ALLOCATOR_USE_BFC=true``).

    TensorFlow's CPU tensors come from glibc malloc by default, which returns each large freed
    buffer to the kernel; every training step then faults its activations back in page by page
    (zeroed by the kernel), and a quarter of the demo's CPU time was system time. The BFC
    allocator keeps freed blocks for the next step: the same steps, a fraction of the page faults
    (``bench/kernel_time.py``). ``TF_CPU_ALLOCATOR_USE_BFC=false`` keeps glibc.
    """
    if "TF_CPU_ALLOCATOR_USE_BFC" in os.environ:
        return False
    os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
    return True


def keep_freed_heap_memory() -> bool:
    """Has glibc keep freed heap memory for the next allocation instead of giving it back.

    Where oneDNN does not take TensorFlow's CPU matrix products (AMD CPUs without AVX-512, for
    one), Eigen computes them and allocates its packing buffers with glibc malloc, not the BFC
    allocator; glibc hands the freed top of the heap back to the kernel, and the next product
    faults it in again, page by page. On a 2-core AMD EPYC the demo spent 26% of its CPU time in
    the kernel (9.3 million page faults in 60 steps); with these settings 5% (286,000) and 50%
    more molecules a second, the same losses (``bench/kernel_time.py --only TF,mallopt``).
    Values set through glibc's own ``MALLOC_*_`` variables are left alone, and so is a libc
    without ``mallopt`` (macOS); ``SEQVAE_MALLOPT=0`` turns this one setting off.
    """
    if os.environ.get("SEQVAE_MALLOPT") == "0" or any(
            name.startswith("MALLOC_") for name in os.environ):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    trim_threshold, top_pad, mmap_threshold = -1, -2, -3  # glibc's M_* parameter numbers
    mallopt(trim_threshold, 1 << 30)
    mallopt(top_pad, 64 << 20)
    if not mallopt(mmap_threshold, 256 << 20):  # above glibc's maximum on some builds
        mallopt(mmap_threshold, 32 << 20)
    return True


def one_thread_per_op() -> bool:
    """On two cores or fewer, has TensorFlow run each op on one thread (``TF_NUM_INTRAOP_THREADS=1``).

    A training step of seqvae's decoder is a loop of small ops (batch 128: a few hundred KiB
    each). Split over two threads, every op hands its halves to TensorFlow's thread pool and
    waits for them: about 8,600 futex calls a step, and on a 2-core Intel Xeon (family 6 model
    167, KVM) 11% of the CPU time in the kernel. With one thread per op, independent ops still
    run side by side (the inter-op pool keeps one thread per core): the demo model trained 498
    against 362 sequences/s, system time 3% against 11%; sampling the same (the same samples),
    ``seqvae encode`` 4% faster (the same means), as the encoder's chain leaves the other core to
    RDKit (``bench/kernel_time.py``). A value the user sets is left alone.
    """
    from seqvae.parallel import worker_count  # os only: TensorFlow is not imported yet

    if "TF_NUM_INTRAOP_THREADS" in os.environ or worker_count() > 2:
        return False
    os.environ["TF_NUM_INTRAOP_THREADS"] = "1"
    return True
