"""What the SMILES grammar mask costs in sampling speed, and what it buys in valid molecules.

    python bench/grammar_throughput.py runs/demo --samples 2000 --rounds 5

Samples the run's prior with the grammar mask and without it (the same z and seeds), in
alternating rounds after an untimed warm-up of each (tracing), timing only the compiled decoding
(``inference.compiled_decoder``: the ``tf.while_loop`` that drops finished rows); texts are
checked with RDKit outside the timing. Prints molecules/s and valid molecules/s per round and
their medians, and the ratios with/without. Issue target: molecules/s with the mask >= 85% of
without it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up


def main() -> int:
    from throughput import cpu_description  # bench/ is first on sys.path when run as a script

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", nargs="?", default="runs/demo")
    parser.add_argument("--samples", type=int, default=2000, help="molecules per round")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import tensorflow as tf
    from rdkit import Chem, rdBase

    from seqvae import inference
    from seqvae.data.preparation import ids_to_texts
    from seqvae.model import decoding, randomness
    from seqvae.run import load_run

    run = load_run(args.run_dir)
    if run.grammar is None:
        parser.error(f"{args.run_dir} is not a SMILES run: it has no grammar mask")
    if run.config.train.grammar_softmax:
        parser.error(f"{args.run_dir} was trained with the constrained softmax: it always "
                     "decodes under the mask, there is nothing to compare")
    # the mask as sampling runs it from inference.COMPILED_MASK_MIN molecules on: under XLA
    deciders = {"grammar": inference.compiled_decoder(run, greedy=False, grammar=True,
                                                      compiled_mask=True),
                "no grammar": inference.compiled_decoder(run, greedy=False, grammar=False)}
    latent = run.config.model.latent_dim

    def one_round(decode_ids, seed: int) -> dict:
        z = decoding.prior_z(args.samples, latent, seed).numpy()
        ids, seconds = [], 0.0
        for i, start in enumerate(range(0, args.samples, args.batch_size)):
            batch = tf.constant(z[start:start + args.batch_size])
            begun = time.perf_counter()
            ids.append(decode_ids(batch, randomness.fold_in(randomness.as_seed(seed), i)).numpy())
            seconds += time.perf_counter() - begun
        texts = [t for chunk in ids for t in ids_to_texts(run.codec, chunk)]
        with rdBase.BlockLogs():
            valid = sum(bool(t) and Chem.MolFromSmiles(t) is not None for t in texts)
        return {"seconds": seconds, "valid": valid,
                "length": statistics.mean(len(t) for t in texts)}

    print(f"bench: {cpu_description()}; run {args.run_dir}; {args.samples} samples x {args.rounds} "
          f"rounds, batch {args.batch_size}", file=sys.stderr)
    for decode_ids in deciders.values():
        one_round(decode_ids, seed=10_000)  # traces, untimed
    results = {name: [] for name in deciders}
    for r in range(args.rounds):
        for name, decode_ids in deciders.items():
            out = one_round(decode_ids, seed=args.seed + r)
            results[name].append(out)
            print(f"bench: round {r + 1}/{args.rounds} {name}: "
                  f"{args.samples / out['seconds']:.0f} mol/s, valid {out['valid']}",
                  file=sys.stderr)

    print("| decoding | mol/s (median) | valid mol/s (median) | valid | mean length (chars) |")
    print("|---|---|---|---|---|")
    medians = {}
    for name, rounds in results.items():
        rate = statistics.median(args.samples / r["seconds"] for r in rounds)
        valid_rate = statistics.median(r["valid"] / r["seconds"] for r in rounds)
        valid = sum(r["valid"] for r in rounds) / (args.samples * len(rounds))
        length = statistics.mean(r["length"] for r in rounds)
        medians[name] = (rate, valid_rate)
        print(f"| {name} | {rate:.0f} | {valid_rate:.0f} | {valid:.4f} | {length:.1f} |")
    ratio = medians["grammar"][0] / medians["no grammar"][0]
    unmasked_valid = medians["no grammar"][1]
    valid_ratio = medians["grammar"][1] / unmasked_valid if unmasked_valid else float("inf")
    print(f"ratios: grammar/no_grammar mol_per_s={ratio:.3f} valid_mol_per_s={valid_ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
