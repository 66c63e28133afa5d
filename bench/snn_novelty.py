"""Where a run's SNN/Test comes from: its novel samples and its samples that are training
molecules, each measured apart, beside random MOSES train molecules as a generator that copies
the training data would give them.

SNN/Test is the mean Tanimoto similarity of a sample to its nearest MOSES test molecule. A
sample found in MOSES train is as test-like as the training molecules are; a novel one is as
test-like as the model makes it. So a run's SNN is ``novelty * SNN(novel) + (1 - novelty) *
SNN(copies)``, and at a given novelty only the novel samples' SNN can raise it. For each run:
``--samples`` molecules drawn as ``seqvae sample`` draws them (seed 0); SNN/Test of the valid
ones, of the novel ones and of the copies; and SNN/Test of as many random MOSES train molecules.

    python bench/snn_novelty.py pretrained:moses
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pretrained_curve import test_reference, valid_molecules  # noqa: E402  (sets TensorFlow up)


def split_snn(drawn: list[str], train: set) -> dict:
    """SNN/Test of the valid molecules of ``drawn``, of those not in ``train`` and of those in
    it, with their counts and the novelty (the whole's SNN is the parts' mean weighted by their
    counts: each part is measured once)."""
    from seqvae.evaluation import metrics

    valid = valid_molecules(drawn)
    novel = [text for text in valid if text not in train]
    copies = [text for text in valid if text in train]
    reference = test_reference()
    snn_novel = metrics.snn(novel, reference) if novel else 0.0
    snn_copies = metrics.snn(copies, reference) if copies else 0.0
    return {"valid": len(valid), "novelty": len(novel) / max(len(valid), 1),
            "snn": (len(novel) * snn_novel + len(copies) * snn_copies) / max(len(valid), 1),
            "snn_novel": snn_novel if novel else float("nan"),
            "snn_copies": snn_copies if copies else float("nan"),
            "novel": len(novel), "copies": len(copies)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories or pretrained:NAME")
    parser.add_argument("--samples", type=int, default=10_000)
    args = parser.parse_args()

    import numpy as np

    from machine import cpu_model
    from seqvae import inference
    from seqvae.data.sources import read_sequences
    from seqvae.evaluation import metrics
    from seqvae.run import load_run

    train_texts = read_sequences("moses:train").texts
    train = set(train_texts)
    rows = []
    for name in args.runs:
        row = {"run": name, **split_snn(inference.sample(load_run(name), args.samples, seed=0),
                                        train)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    picked = np.random.default_rng(0).choice(len(train_texts), args.samples, replace=False)
    copied = metrics.snn([train_texts[i] for i in picked], test_reference())
    print(f"\n{args.samples:,} samples each, seed 0; {cpu_model()}.\n")
    print("| run | novelty | SNN/Test | of the novel | of the copies |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['run']} | {row['novelty']:.3f} | {row['snn']:.3f} | "
              f"{row['snn_novel']:.3f} ({row['novel']:,}) | {row['snn_copies']:.3f} "
              f"({row['copies']:,}) |")
    print(f"| {args.samples:,} random MOSES train molecules | 0 | {copied:.3f} | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
