"""What storing a shipped model's prior in float16 costs: the run it was shipped from and the
shipped model, each sampled as ``bench/pretrained_curve.py`` samples a checkpoint (10,000
molecules by rejection under the grammar, seed 0; validity, unique@10k, novelty against MOSES
train, FCD against MOSES's test statistics).

    python bench/shipped_prior.py runs/ft_b05_6k pretrained:moses
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pretrained_curve import sample_quality  # noqa: E402


def main() -> int:
    from seqvae.data.sources import read_sequences
    from seqvae.run import load_run

    train = set(read_sequences("moses:train").texts)
    for name in sys.argv[1:]:
        print(name, json.dumps(sample_quality(load_run(name), 10_000, train)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
