"""Speed of the nearest-neighbour Tanimoto search behind SNN (and IntDiv): seqvae's popcount
kernel against the float32 bit-matrix product (the arithmetic of MOSES's ``average_agg_tanimoto``,
here through numpy's BLAS), on real fingerprints, in the same run.

    python bench/tanimoto_speed.py --generated 2000

The references are the MOSES test split (176,074 molecules, Morgan radius 2, 1,024 bits); the
"generated" molecules are the first ``--generated`` of the scaffold test split. seqvae's kernel
is timed both ways it counts (``tanimoto.METHOD``: the popcount, and the bfloat16 product that
``auto`` takes on CPUs with AMX; elsewhere that row is slow and only shown). Prints the seconds of
each, the ratios, and whether all give the same similarities.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up

import numpy as np  # noqa: E402


def product_nearest(gen_bits: np.ndarray, ref_bits: np.ndarray,
                    block_elements: int = 1 << 23) -> np.ndarray:
    """Max Tanimoto of each generated fingerprint over the references, as a float32 product of
    the unpacked bits in blocks of ``block_elements`` similarities (seqvae's code until the
    popcount kernel; MOSES computes the same product in torch)."""
    gen = np.unpackbits(gen_bits, axis=1).astype(np.float32)
    gen_sums = gen.sum(1)
    result = np.zeros(len(gen))
    chunk = max(1, block_elements // len(gen))
    for start in range(0, len(ref_bits), chunk):
        ref = np.unpackbits(ref_bits[start:start + chunk], axis=1).astype(np.float32)
        shared = gen @ ref.T
        union = np.add.outer(gen_sums, ref.sum(1)) - shared
        with np.errstate(invalid="ignore"):
            similarity = shared / union
        similarity[np.isnan(similarity)] = 1.0
        np.maximum(result, similarity.max(1), out=result)
    return result


def fingerprints(split: str, limit: int = 0) -> np.ndarray:
    from seqvae.data.chemistry import to_mol
    from seqvae.data.sources import read_sequences
    from seqvae.evaluation import molecules

    return molecules.fingerprints([to_mol(text) for text in read_sequences(split, limit=limit).texts])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generated", type=int, default=2000,
                        help="molecules of moses:test_scaffolds searched for their nearest")
    args = parser.parse_args()
    from seqvae.evaluation import tanimoto

    from throughput import cpu_description  # bench/ is first on sys.path when run as a script

    def kernel(method: str):
        def nearest(gen_bits, ref_bits):
            tanimoto.METHOD = method
            try:
                return tanimoto.aggregate_tanimoto(gen_bits, ref_bits, agg="max")
            finally:
                tanimoto.METHOD = "auto"
        nearest(gen[:8], ref[:8])  # TensorFlow's start and the compilations, untimed
        return nearest

    ref, gen = fingerprints("moses:test"), fingerprints("moses:test_scaffolds", args.generated)
    timings, results = {}, {}
    for name, function in (("float32 bit-matrix product (numpy BLAS)", product_nearest),
                           ("seqvae popcount kernel (XLA)", kernel("popcount")),
                           ("seqvae bfloat16 product (AMX where present) + XLA", kernel("matmul"))):
        started = time.perf_counter()
        results[name] = function(gen, ref)
        timings[name] = time.perf_counter() - started
    product = timings["float32 bit-matrix product (numpy BLAS)"]
    first, *others = results.values()
    same = all(np.array_equal(first, other) for other in others)
    print(f"{len(gen)} generated x {len(ref)} reference fingerprints; CPU: {cpu_description()}")
    for name, seconds in timings.items():
        print(f"  {name}: {seconds:.2f} s ({len(gen) * len(ref) / seconds / 1e6:.0f} M pairs/s, "
              f"{product / seconds:.2f}x the product)")
    print(f"  tanimoto.METHOD auto takes: "
          f"{'the bfloat16 product' if tanimoto._use_matmul(gen, ref) else 'the popcount'}; "
          f"identical similarities: {'yes' if same else 'no'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
