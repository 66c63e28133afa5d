"""The SMILES grammar mask never forbids a real molecule: every MOSES train molecule, tokenized,
passes the state machine step by step (teacher-forced: each next token must be allowed).

    python bench/grammar_coverage.py                 # the whole train split (1.58 M)
    python bench/grammar_coverage.py --limit 20000   # a sample
    python bench/grammar_coverage.py --kekulize      # their Kekule forms (data.kekulize runs)

Prints the number checked, the violations (with the first few molecules and the position at
which the mask forbade their token) and the rate in molecules per second.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up


def violations(texts: list[str], batch_size: int = 4096) -> tuple[list[tuple[str, int]], int]:
    """Returns ([(text, position)] of texts the grammar rejects, number checked)."""
    import numpy as np
    import tensorflow as tf

    from seqvae.data.tokenizers import SmilesTokenizer
    from seqvae.data.vocabulary import Vocabulary
    from seqvae.model.grammar import SmilesGrammar

    tokenizer = SmilesTokenizer()
    tokenized = [tokenizer.tokenize(text) for text in texts]
    vocab = Vocabulary.fit(tokenized)
    grammar = SmilesGrammar.from_tokens(vocab.tokens)
    max_len = max(map(len, tokenized)) + 1
    check = tf.function(grammar.first_violation)
    bad = []
    for start in range(0, len(texts), batch_size):
        chunk = tokenized[start:start + batch_size]
        ids = np.zeros((len(chunk), max_len), np.int32)
        for row, tokens in enumerate(chunk):
            encoded = vocab.encode(tokens)
            ids[row, :len(encoded)] = encoded
        first = check(tf.constant(ids)).numpy()
        bad += [(texts[start + row], int(first[row])) for row in np.flatnonzero(first >= 0)]
    return bad, len(texts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="train")
    parser.add_argument("--limit", type=int, default=0, help="first N molecules (0 = all)")
    parser.add_argument("--kekulize", action="store_true", help="check the Kekule forms")
    args = parser.parse_args()
    from seqvae.data.chemistry import kekule_smiles
    from seqvae.data.sources import read_sequences

    texts = read_sequences(f"moses:{args.split}", limit=args.limit).texts
    if args.kekulize:
        texts = [kekule_smiles(text) for text in texts]
    started = time.monotonic()
    bad, checked = violations(texts)
    seconds = time.monotonic() - started
    print(f"moses:{args.split}: {checked:,} molecules checked, {len(bad):,} forbidden by the "
          f"grammar mask ({checked / seconds:,.0f} molecules/s)")
    for text, position in bad[:20]:
        print(f"  {text}  (token {position})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
