"""How a trained MOSES run is best sampled: the aggregate posterior's size (kernels) and width
(``model.prior_widen``), the decoder's temperature, and the standard normal prior, each measured
on the same checkpoint the way ``bench/pretrained_curve.py`` measures a step.

A sharper decoder gives its kernel's training molecule back more often: unique@10k falls (two
draws from one kernel) and so does novelty, while widening the kernels raises both and costs
FCD. For every combination of ``--kernels``, ``--widen`` and ``--temperature`` (and a row for
``--prior standard``, and for Gaussian mixtures fitted to the encodings, ``--components``), on a copy of the run at ``--step`` (default: its latest checkpoint) in
``OUT/step-S`` (the run itself is not touched): validity, unique@10k, novelty against MOSES
train, FCD/Test (and with ``--snn`` SNN/Test) and the share the grammar rejected, of
``--samples`` molecules.

    python bench/prior_grid.py runs/pretrained_moses --out runs/prior_grid \\
        --kernels 50000,150000 --widen 1.0,1.2,1.45 --temperature 1.0,0.9
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pretrained_curve import checkpoint_steps, sample_quality, view_at  # noqa: E402
from seqvae import runtime  # noqa: E402

runtime.tune_process()


def numbers(text: str, kind=float) -> list:
    return [kind(part) for part in text.split(",") if part]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--out", required=True)
    parser.add_argument("--step", type=int, default=0, help="checkpoint (default: the latest)")
    parser.add_argument("--kernels", default="50000")
    parser.add_argument("--widen", default="1.45")
    parser.add_argument("--temperature", default="1.0")
    parser.add_argument("--standard", action="store_true", help="also the N(0, I) prior")
    parser.add_argument("--components", default="",
                        help="also Gaussian mixtures of these sizes fitted to the encodings of "
                             "the largest --kernels (seqvae fit-prior --components K)")
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--snn", action="store_true",
                        help="also SNN/Test (MOSES's test split's fingerprints, ~1 min once)")
    args = parser.parse_args()

    from machine import cpu_model
    from seqvae import inference, latent_prior
    from seqvae.data.sources import random_subset, read_sequences
    from seqvae.run import load_run

    step = args.step or checkpoint_steps(args.run_dir)[-1]
    run = load_run(view_at(args.run_dir, step, args.out))
    molecules = read_sequences("moses:train")
    train = set(molecules.texts)
    rows = []

    def measure_all(name: str, prior=None) -> None:
        """Measures a prior at every temperature: ``prior`` saved as the copy's own (fitted),
        None for N(0, I)."""
        started = time.monotonic()
        if prior is not None:
            latent_prior.save(run.run_dir, prior)
        for temperature in numbers(args.temperature):
            row = sample_quality(run, args.samples, train, temperature,
                                 prior="standard" if prior is None else "fitted", snn=args.snn)
            rows.append({"prior": name, "temperature": temperature, **row,
                         "seconds": round(time.monotonic() - started)})
            print(json.dumps(rows[-1]), flush=True)
            started = time.monotonic()

    kernel_counts = numbers(args.kernels, int)
    for kernels in kernel_counts:  # each set of molecules encoded once, for every width
        mean, log_var, source = inference.prior_encodings(
            run, random_subset(molecules, kernels, seed=0).texts, limit=0)
        for widen in numbers(args.widen):
            measure_all(f"aggregate, {kernels:,} kernels x {widen:g}",
                        latent_prior.fit_aggregate(mean, log_var, source, widen))
        if kernels == max(kernel_counts):
            for components in numbers(args.components, int):
                measure_all(f"mixture of {components} Gaussians",
                            latent_prior.fit(mean, log_var, source, components=components))
    if args.standard:
        measure_all("standard N(0, I)")
    lines = [f"`{args.run_dir}` at step {step:,}; {args.samples:,} samples each; {cpu_model()}.",
             "", "| prior | temperature | valid | unique@10k | novelty | FCD/Test | "
             + ("SNN/Test | " if args.snn else "") + "rejected |",
             "|---|---:|---:|---:|---:|---:|" + ("---:|" if args.snn else "") + "---:|"]
    for r in rows:
        snn = f"{r['snn_test']:.3f} | " if args.snn else ""
        lines.append(f"| {r['prior']} | {r['temperature']:g} | {r['valid']:.4f} | "
                     f"{r['unique@10k']:.4f} | {r['novelty']:.3f} | {r['fcd_test']:.2f} | "
                     f"{snn}{100 * r['rejected']:.1f}% |")
    with open(os.path.join(args.out, f"grid-{step}.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
