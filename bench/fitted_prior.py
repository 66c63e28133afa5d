"""Sampling from N(0, I) against priors fitted to the run's encodings (ex-post density estimation).

    python bench/fitted_prior.py runs/ablation/kekule_beta0.03_molecule_bidir_gsoftmax --components 1,10

A VAE trained with a small KL weight (a latent that carries the molecule) leaves "holes" in
N(0, I) that no training molecule encodes to; Ghosh et al. 2020 sample instead from a density
fitted to the encodings after training. For the standard prior and for a prior of each number
of components (``seqvae fit-prior --components K`` on 50,000 MOSES training
molecules), draws the same 10,000 samples' noise at T = 1.0 and prints validity, unique@10k,
novelty and FCD against 10,000 MOSES test molecules drawn at random (`--full-test`: all of them),
and the fit's time; ``--aggregate W1,W2`` adds the aggregate-posterior prior of the same 50,000
encodings widened by each factor (``seqvae fit-prior --aggregate --widen W``; the demo's
``model.prior=aggregate``). Samples are drawn as ``seqvae sample`` draws them (by rejection under
the grammar for the demo: the share of first draws rejected is printed). The ``--bounds`` rows
decode under the grammar mask. The run's own prior file (``RUN/latent_prior.npz``: the demo's
aggregate posterior) is put back as it was at the end, even if the bench fails; a run without
one is left without one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--components", default="1,10",
                        help="comma-separated mixture sizes ('' for none)")
    parser.add_argument("--aggregate", default="",
                        help="comma-separated widening factors of the aggregate-posterior prior "
                        "(seqvae fit-prior --aggregate --widen W), e.g. 1,1.4")
    parser.add_argument("--fit-limit", type=int, default=50_000, help="training encodings fitted")
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bounds", action="store_true",
                        help="also the aggregate-posterior and greedy-reconstruction rows")
    parser.add_argument("--full-test", action="store_true",
                        help="FCD against all of MOSES test (evaluate's scale; its cached "
                        "statistics) instead of 10,000 of its molecules drawn at random")
    args = parser.parse_args()

    import numpy as np
    from latent_ablation import sample_measures  # bench/ is first on sys.path as a script

    from seqvae import inference
    from seqvae.data.sources import read_sequences
    from seqvae.run import load_run

    run = load_run(args.run_dir)
    # MOSES's split files are not shuffled (bench/fcd_reference.py): every set of molecules
    # here is drawn at random
    test = read_sequences("moses:test").texts
    test = [test[i] for i in np.random.default_rng(args.seed).permutation(len(test))]
    reference = test[:10_000]
    if args.full_test:
        from seqvae.evaluation.moses_files import moses_reference

        reference = moses_reference("test")
    train = read_sequences("moses:train").texts
    train_set = set(train)
    rows = bound_rows(run, args, train, train_set, test, reference) if args.bounds else []
    names = (["standard"] + [f"fitted-{k}" for k in filter(None, args.components.split(","))]
             + [f"aggregate-{w}" for w in filter(None, args.aggregate.split(","))])
    with kept_prior_file(args.run_dir):  # the fits replace the run's own prior
        for name in names:
            row, started = {"prior": name}, time.monotonic()
            kind, _, size = name.partition("-")
            if kind != "standard":
                inference.fit_prior(run, "moses:train", limit=args.fit_limit,
                                    components=int(size) if kind == "fitted" else 1,
                                    aggregate=kind == "aggregate",
                                    widen=float(size) if kind == "aggregate" else None)
                row["fit_s"] = round(time.monotonic() - started, 1)
            stats: dict = {}
            samples = inference.sample(run, args.samples, temperature=1.0, seed=args.seed,
                                       prior="standard" if kind == "standard" else "fitted",
                                       stats=stats)
            row["rejected"] = stats.get("rejected", 0.0)
            row.update(sample_measures(samples, train_set, reference))
            rows.append({k: (round(float(v), 4) if isinstance(v, float) else v)
                         for k, v in row.items()})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(f"\n{args.run_dir}, {args.samples} samples at T = 1.0 each\n")
    scale = "all" if args.full_test else "10k"
    print(f"| prior | valid | unique@10k | novelty | FCD/Test ({scale}) | first draws rejected "
          "| fit (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        fcd = "n/a" if row["fcd"] is None else f"{row['fcd']:.2f}"
        rejected = f"{row['rejected']:.3f}" if "rejected" in row else ""
        print(f"| {row['prior']} | {row['valid']:.3f} | {row['unique']:.3f} | "
              f"{row['novelty']:.3f} | {fcd} | {rejected} | {row.get('fit_s', '')} |")
    return 0


@contextlib.contextmanager
def kept_prior_file(run_dir: str):
    """Puts ``RUN_DIR/latent_prior.npz`` back as it was (or removes it if there was none) when
    the block ends, atomically."""
    from seqvae import latent_prior

    path = os.path.join(run_dir, latent_prior.FILENAME)
    saved = None
    if os.path.exists(path):
        with open(path, "rb") as handle:
            saved = handle.read()
    try:
        yield
    finally:
        if saved is None:
            if os.path.exists(path):
                os.remove(path)
        else:
            with open(path + ".restoring", "wb") as handle:
                handle.write(saved)
            os.replace(path + ".restoring", path)


def bound_rows(run, args, train: list[str], train_set: set[str], test: list[str],
               reference) -> list[dict]:
    """The ``--bounds`` rows: T = 1.0 decodings of ``z ~ q(z | x)`` for training molecules the
    run did not train on, drawn at random, and greedy decodings of the posterior means of test
    molecules (``test`` is shuffled: its first 10,000 are the FCD reference, the next ones are
    decoded; with ``--full-test`` the reference is all of test, which then holds the
    reconstructed molecules too)."""
    import numpy as np

    from latent_ablation import sample_measures

    from seqvae import inference
    from seqvae.model.decoding import prior_z

    rows = []
    unseen = unseen_rows(run, len(train))
    picked = np.random.default_rng(args.seed).choice(unseen, args.samples + args.samples // 5,
                                                     replace=False)
    held_out = [train[i] for i in picked]
    for name, source, greedy in (("aggregate posterior, T = 1.0", held_out, False),
                                 ("greedy reconstructions", test[10_000:], True)):
        started = time.monotonic()
        ids = inference.encode_ids(run, source[:args.samples + args.samples // 5], skip=True).ids
        mean, log_var = inference.encode_batches(run, ids[:args.samples])
        z = mean if greedy else mean + np.exp(0.5 * log_var) * prior_z(
            len(mean), mean.shape[1], args.seed).numpy()
        texts = inference.decode(run, z, greedy=greedy, seed=args.seed)
        row = {"prior": name, **sample_measures(texts, train_set, reference),
               "fit_s": round(time.monotonic() - started, 1)}
        rows.append({k: (round(float(v), 4) if isinstance(v, float) else v) for k, v in row.items()})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def unseen_rows(run, size: int):
    """Rows of MOSES train (0-based) outside the run's training data: past its first
    ``data.limit`` lines, or outside its draw of ``data.subset=random`` (the same draw
    ``prepare_data`` makes)."""
    import numpy as np

    from seqvae.data.sources import random_rows

    data = run.config.data
    if not data.limit:
        raise SystemExit("the run trained on all of MOSES train: no held-out training molecules")
    seen = (random_rows(size, data.limit, run.config.train.seed) if data.subset == "random"
            else np.arange(data.limit))
    mask = np.ones(size, bool)
    mask[seen] = False
    return np.flatnonzero(mask)


if __name__ == "__main__":
    sys.exit(main())
