"""Sampling a VAE and a language model of the same data together: each token is drawn from
``p_vae(token | prefix, z)^w * p_lm(token | prefix)^(1 - w)`` renormalised (z from the VAE's own
prior), so w = 1 is the VAE as it samples and w = 0 the language model alone. Does the language
model's view of the data lift the VAE's samples (FCD, novelty) while z still shapes them?

For each weight: ``--samples`` molecules (seed 0), decoded without the grammar (the share RDKit
parses is the validity; the invalid are left out, as a rejection sampler would redraw them),
unique@10k, novelty against MOSES train and FCD against MOSES's own test statistics.

    python bench/lm_mixture.py runs/pretrained_moses runs/lm_curve/step-8000 --weights 0,0.5,1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # pretrained_curve beside it

from pretrained_curve import drawn_quality  # noqa: E402  (it sets TensorFlow up as the CLI does)

BATCH = 1000


def mixed_sampler(vae, lm):
    """``(z (B, L), weight, seed int32 (2,)) -> ids int32 (B, T)``, compiled once."""
    import tensorflow as tf

    from seqvae.model import decoding
    from seqvae.data.vocabulary import EOS_ID

    model = vae.model

    @tf.function(reduce_retracing=True)
    def sample(z, weight, seed):
        step_vae, state_vae = decoding.decoder_step_fn(model.decoder, z)
        step_lm, state_lm = decoding.decoder_step_fn(lm.model.decoder, z)  # z unused by it

        def step(tokens, state):
            logits_vae, new_vae = step_vae(tokens, state[0])
            logits_lm, new_lm = step_lm(tokens, state[1])
            logits = (weight * tf.nn.log_softmax(logits_vae)
                      + (1.0 - weight) * tf.nn.log_softmax(logits_lm))
            return logits, (new_vae, new_lm)

        return decoding.decode_loop(step, (state_vae, state_lm), tf.shape(z)[0], model.max_len,
                                    start_id=model.bos_id, eos_id=EOS_ID, seed=seed)

    return sample


def measure(vae, sample, weight: float, samples: int, train: set) -> dict:
    """One weight's row: ``samples`` molecules from ``sample`` (``mixed_sampler``) scored."""
    import numpy as np
    import tensorflow as tf

    from seqvae import inference
    from seqvae.data.preparation import ids_to_texts

    started = time.monotonic()
    texts = []
    for first in range(0, samples, BATCH):
        count = min(BATCH, samples - first)
        z = inference.prior_draw(vae, count, first)
        ids = sample(tf.constant(z), tf.constant(weight, tf.float32),
                     tf.constant([first, 7], tf.int32))
        texts += ids_to_texts(vae.codec, np.asarray(ids))
    row = drawn_quality(texts, train)
    return {"weight": weight, **row, "fcd_test": round(row["fcd_test"], 3),
            "seconds": round(time.monotonic() - started)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("vae")
    parser.add_argument("lm")
    parser.add_argument("--weights", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--samples", type=int, default=10_000)
    args = parser.parse_args()

    from seqvae.data.sources import read_sequences
    from seqvae.errors import SeqvaeError
    from seqvae.run import load_run

    vae, lm = load_run(args.vae), load_run(args.lm)
    if vae.codec.vocab != lm.codec.vocab:
        raise SeqvaeError(f"{args.vae} and {args.lm} have different vocabularies")
    train = set(read_sequences("moses:train").texts)
    print("| w (VAE's share) | valid | unique@10k | novelty | FCD/Test | s |")
    print("|---:|---:|---:|---:|---:|---:|")
    sample = mixed_sampler(vae, lm)  # one trace: the weight is an argument
    for weight in (float(w) for w in args.weights.split(",")):
        row = measure(vae, sample, weight, args.samples, train)
        print(json.dumps(row), file=sys.stderr, flush=True)
        print(f"| {weight:g} | {row['valid']:.4f} | {row['unique@10k']:.4f} | "
              f"{row['novelty']:.3f} | {row['fcd_test']:.2f} | {row['seconds']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
