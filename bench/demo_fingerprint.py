"""A fingerprint of the demo's recipe: the same numbers before and after a change that must not
change them.

Trains the demo preset's recipe for a short fixed run (``--steps`` steps on ``--limit`` MOSES
molecules drawn at random; its prior, grammar features and rejection sampling as in the demo),
samples ``-n`` molecules, and prints SHA-256 digests of the weights, of the losses logged in
``metrics.jsonl`` (times left out) and of ``samples_t1.smi``. Two commits that print the same
three digests on one machine trained the same model and sampled the same molecules.

    python bench/demo_fingerprint.py --out runs/fingerprint
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/fingerprint")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--limit", type=int, default=20_000)
    parser.add_argument("-n", type=int, default=1000)
    args = parser.parse_args()

    from seqvae import inference
    from seqvae.presets import demo_config
    from seqvae.run import load_run
    from seqvae.workflows import train

    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    config = demo_config().with_overrides([f"train.max_steps={args.steps}",
                                           f"data.limit={args.limit}", "model.prior_encodings=5000",
                                           "train.export_at_end=false"])
    summary = train(config, args.out)
    run = load_run(args.out)
    samples = inference.sample(run, args.n, seed=0)
    path = os.path.join(args.out, "samples_t1.smi")
    with open(path, "w") as handle:
        handle.write("".join(f"{text}\n" for text in samples))
    with open(os.path.join(args.out, "metrics.jsonl")) as handle:
        losses = [{k: v for k, v in json.loads(line).items() if not k.endswith(("_s", "seq_per_s"))}
                  for line in handle]
    print(f"weights  {summary['weights_checksum']}")
    print(f"losses   {hashlib.sha256(json.dumps(losses, sort_keys=True).encode()).hexdigest()[:16]}")
    with open(path, "rb") as handle:
        print(f"samples  {hashlib.sha256(handle.read()).hexdigest()[:16]}  ({path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
