"""Does a decoder that reads the asked-for properties pay? A measurement before building one.

Trains the run's recipe (its model and training sections, its data and vocabulary, its number
of steps) once more with one change: the decoder reads the molecule's standardised RDKit
``--properties`` beside z (a conditional VAE's decoder, ``p(x | z, y)``; the encoder is the
run's, ``q(z | x)``). Then, for the conditions (``--where``; the joint condition of
``bench/conditional.py`` by default), ``--draws`` molecules each, decoded as the search decodes
(without the grammar's mask, a rejected string a miss):

- its prior: z from the kernel of a random training molecule (the aggregate posterior, widened
  by ``model.prior_widen``) with that molecule's own y: sampling and filtering;
- z from the prior, y of a random reference molecule meeting the conditions: the decoder asked
  for them;
- z from the kernel of a reference molecule meeting the conditions, at each width of
  ``--widths``, with that molecule's own y: the search's draws, with y to hold them.

Per row: hit rate, the share of hits that are reference molecules (training molecules with known
values), unique among hits, and new distinct hits (neither a reference molecule nor found before
in the row) over the prior's rate of distinct hits. ``bench/kernel_ceiling.py`` gives the same
rows for the run itself (without y).

    flock /tmp/seqvae-bench.lock python bench/conditional_decoder.py runs/demo --out runs/cond_decoder
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from machine import cpu_model  # noqa: E402
from seqvae import runtime  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from seqvae.model.vae import SequenceVAE  # noqa: E402


class ConditionalVAE(SequenceVAE):
    """The run's VAE with a decoder that reads ``concat(z, y)``, y float32 ``(B, P)``."""

    def __init__(self, config, vocab_size, max_len, num_conditions, grammar,
                 encoder_reads: bool = False):
        super().__init__(config, vocab_size, max_len, grammar=grammar)
        import keras

        from seqvae.model.decoder import Decoder

        wider = dataclasses.replace(config, latent_dim=config.latent_dim + num_conditions)
        self.decoder = Decoder(wider, vocab_size, start_id=self.bos_id, name="decoder")
        self.decoder.grammar, self.decoder.grammar_max_len = grammar, max_len
        self.num_conditions = num_conditions
        self.y_shift = None  # q(z | x, y): y shifts the posterior's mean and log-variance
        if encoder_reads:
            self.y_shift = keras.layers.Dense(2 * config.latent_dim, use_bias=False,
                                              kernel_initializer="zeros", name="y_shift")

    def posterior(self, ids, y, training=False):
        """``(mean, log_var)`` float ``(B, L)`` of ``q(z | x)``, or of ``q(z | x, y)``."""
        z_mean, z_log_var = self.encoder(ids, training=training)
        if self.y_shift is None:
            return z_mean, z_log_var
        mean_shift, log_var_shift = tf.split(self.y_shift(tf.cast(y, z_mean.dtype)), 2, -1)
        return z_mean + mean_shift, z_log_var + log_var_shift

    def losses_of(self, ids, y, z_noise, kl_weight):
        """``(loss, recon per token, kl)`` of a batch: the per-molecule ELBO with ``kl_weight``."""
        from seqvae.model.likelihood import kl_per_dimension, sequence_cross_entropy
        from seqvae.model import randomness

        z_mean, z_log_var = self.posterior(ids, y, training=True)
        z = randomness.reparametrize(z_mean, z_log_var, tf.cast(z_noise, z_mean.dtype))
        logits = self.decoder(tf.concat([z, tf.cast(y, z.dtype)], -1), self.decoder_inputs(ids),
                              training=True, features=self.decoder_features(ids))
        recon = sequence_cross_entropy(ids, tf.cast(logits, tf.float32))
        kl = tf.reduce_sum(kl_per_dimension(tf.cast(z_mean, tf.float32),
                                            tf.cast(z_log_var, tf.float32)))
        rows = tf.cast(tf.shape(ids)[0], tf.float32)
        tokens = tf.reduce_sum(tf.cast(ids > 0, tf.float32))
        return tf.reduce_sum(recon) / rows + kl_weight * kl, tf.reduce_sum(recon) / tokens, kl


def train(run, out: str, names, steps_wanted: int | None, encoder_reads: bool = False):
    """Trains the conditional variant (or loads it from ``out``): ``(model, y mean (P,),
    y std (P,), seconds it trained)``."""
    import keras

    from seqvae.data import batching
    from seqvae.data.preparation import prepare_data
    from seqvae.data.properties import rdkit_properties
    from seqvae.model.precision import resolve_precision
    from seqvae.model.vae import precision_policy
    from seqvae.training import schedules

    config = run.config
    os.makedirs(out, exist_ok=True)
    keras.utils.set_random_seed(config.train.seed)
    weights = os.path.join(out, "conditional")
    trained = os.path.exists(weights + ".index")  # decoding runs in float32, as runs load
    with precision_policy("float32" if trained else resolve_precision(config.train.precision)):
        model = ConditionalVAE(config.model, len(run.codec.vocab), run.max_len, len(names),
                               run.grammar, encoder_reads)
        model.posterior(tf.zeros([1, 2], tf.int32), tf.zeros([1, len(names)]))
        model.decoder(tf.zeros([1, config.model.latent_dim + len(names)]), tf.zeros([1, 2], tf.int32),
                      features=model.decoder_features(tf.zeros([1, 2], tf.int32)))
    parts = dict(encoder=model.encoder, decoder=model.decoder)
    if model.y_shift is not None:
        parts["y_shift"] = model.y_shift
    checkpoint = tf.train.Checkpoint(**parts)
    stats = os.path.join(out, "standardisation.npz")
    if trained:
        checkpoint.read(weights).assert_existing_objects_matched()
        saved = np.load(stats)
        return model, saved["mean"], saved["std"], float(saved["seconds"])
    started = time.monotonic()
    prepared = prepare_data(config.data, run.info["data_source"], codec=run.codec,
                            seed=config.train.seed)
    cache = os.path.join(out, "properties.npy")
    if os.path.exists(cache):
        values = np.load(cache)
    else:
        values = rdkit_properties(prepared.texts, names)
        np.save(cache, values)
    mean, std = np.nanmean(values, 0), np.nanstd(values, 0)
    y = np.nan_to_num((values - mean) / std).astype(np.float32)
    print(f"{len(y):,} molecules and their {', '.join(names)} in {time.monotonic() - started:.0f} s",
          flush=True)
    total = steps_wanted or config.train.max_steps
    planned = tf.Variable(total, dtype=tf.int64, trainable=False)
    optimizer = keras.optimizers.Adam(
        learning_rate=schedules.LearningRateSchedule(config.train, planned),
        global_clipnorm=config.train.clip_norm)
    latent = config.model.latent_dim

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32),
                                  tf.TensorSpec([None, len(names)], tf.float32),
                                  tf.TensorSpec([], tf.int64)])
    def step(ids, targets, number):
        noise = tf.random.stateless_normal([tf.shape(ids)[0], latent],
                                           tf.stack([tf.cast(number, tf.int32), 7]))
        weight = tf.cast(schedules.kl_weight(number, config.train, total), tf.float32)
        with tf.GradientTape() as tape:
            loss, recon, kl = model.losses_of(ids, targets, noise, weight)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, recon, kl

    index = prepared.train_index
    lengths = prepared.lengths[index]
    done, epoch = 0, 0
    while done < total:
        plan = batching.batch_plan(lengths, config.train.batch_size, config.train.seed, epoch,
                                   config.data.bucket)
        for batch in plan:
            rows = index[batch]
            width = batching.padded_length(lengths[batch], config.bucket_width(), run.max_len)
            loss, recon, kl = step(tf.constant(prepared.ids[rows, :width]), tf.constant(y[rows]),
                                   tf.constant(done, tf.int64))
            done += 1
            if done % 250 == 0:
                print(f"step {done}: loss {float(loss):.2f}, recon/token {float(recon):.4f}, "
                      f"KL {float(kl):.1f}, {time.monotonic() - started:.0f} s", flush=True)
            if done >= total:
                break
        epoch += 1
    checkpoint.write(weights)
    np.savez(stats, mean=mean, std=std, seconds=time.monotonic() - started)
    return train(run, out, names, steps_wanted, encoder_reads)  # loaded again in float32


def decoded(run, model, z, y, seed: int) -> list:
    """Texts decoded from ``concat(z, y)`` without the grammar's mask (None: rejected)."""
    from seqvae.data.preparation import ids_to_texts
    from seqvae.model import decoding

    ids, rejected = decoding.sample_from_z(
        model, tf.constant(np.concatenate([z, y], 1), tf.float32), run.max_len, greedy=False,
        seed=tf.constant([seed, 11]), grammar=run.grammar, reject=True)
    return [None if bad else text
            for text, bad in zip(ids_to_texts(run.codec, ids.numpy()), rejected.numpy())]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--out", default="runs/cond_decoder")
    parser.add_argument("--properties", default="logp,qed")
    parser.add_argument("--where", action="append", default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--widths", default="1.0,1.3,1.6,1.8")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--report", default="bench/conditional_decoder.md")
    parser.add_argument("--encoder-reads-y", action="store_true",
                        help="the encoder reads y too: q(z | x, y), a conditional VAE")
    args = parser.parse_args(argv)
    started = time.monotonic()

    from kernel_ceiling import Tally
    from seqvae.conditional import kernels as kernel_lib
    from seqvae.conditional.conditions import Checker, describe, parse_conditions
    from seqvae.conditional.search import _canonical
    from seqvae.data.preparation import encode_texts
    from seqvae.run import load_run

    run = load_run(args.run_dir)
    names = tuple(args.properties.split(","))
    model, mean, std, trained = train(run, args.out, names, args.steps, args.encoder_reads_y)
    conditions = parse_conditions(args.where or ["logp>=3", "qed>=0.85"])
    checker = Checker(conditions)
    table = kernel_lib.reference_table(run, names)
    references = _canonical(table.texts, table.source)
    meeting, _ = kernel_lib.near_target(table, conditions)
    rng = np.random.default_rng(0)
    anyone = rng.choice(len(table.texts), min(20_000, len(table.texts)), replace=False)

    def y_of(rows):
        return ((table.values[rows][:, [table.names.index(n) for n in names]] - mean)
                / std).astype(np.float32)

    def encoded(rows):
        encoded = encode_texts(run.codec, [table.texts[i] for i in rows], on_error="skip")
        y = y_of(rows[encoded.kept])
        parts = [model.posterior(tf.constant(encoded.ids[start:start + 2000]),
                                 y[start:start + 2000])
                 for start in range(0, len(encoded.ids), 2000)]
        means = np.concatenate([m.numpy() for m, _ in parts]).astype(np.float32)
        log_vars = np.concatenate([v.numpy() for _, v in parts]).astype(np.float32)
        scales = run.config.model.prior_widen * np.exp(0.5 * log_vars)
        return rows[encoded.kept], means, scales

    prior_rows, prior_means, prior_scales = encoded(anyone)
    kernel_rows, kernel_means, kernel_scales = encoded(meeting)

    def measure(label, draw):
        tally = Tally(references)
        for step, start in enumerate(range(0, args.draws, args.batch)):
            z, y = draw(min(args.batch, args.draws - start))
            tally.add(checker.check([t or "" for t in decoded(run, model, z, y, step)]))
        print(tally.row(label), flush=True)
        return tally.row(label)

    def near(means, scales, width=1.0):
        def draw(count):
            pick = rng.integers(0, len(means), count)
            eps = rng.standard_normal((count, means.shape[1])).astype(np.float32)
            return pick, means[pick] + width * scales[pick] * eps
        return draw

    def prior(count):
        pick, z = near(prior_means, prior_scales)(count)
        return z, y_of(prior_rows[pick])

    def asked(count):
        _, z = near(prior_means, prior_scales)(count)
        return z, y_of(kernel_rows[rng.integers(0, len(kernel_rows), count)])

    rows = [measure("the prior, each molecule's own y", prior),
            measure("the prior, y of a molecule meeting the conditions", asked)]
    for width in [float(w) for w in args.widths.split(",")]:
        def steered(count, width=width):
            pick, z = near(kernel_means, kernel_scales, width)(count)
            return z, y_of(kernel_rows[pick])
        rows.append(measure(f"kernels meeting the conditions, {width:g}x, their own y", steered))
    base = rows[0][5]
    reader = "A decoder and an encoder that read" if args.encoder_reads_y else "A decoder that reads"
    lines = [f"# {reader} {', '.join(names)}: {describe(conditions)}", "",
             "    flock /tmp/seqvae-bench.lock python bench/conditional_decoder.py "
             + " ".join(argv if argv is not None else sys.argv[1:]), "",
             f"The recipe of `{args.run_dir}` with a decoder that reads the standardised "
             f"{', '.join(names)} beside z"
             + (" and an encoder that reads them too" if args.encoder_reads_y else "")
             + f", trained in {trained:.0f} s (kept in `{args.out}`, read from there when "
             f"run again); {len(kernel_rows):,} kernels meeting the conditions; "
             f"{args.draws:,} draws a row; {cpu_model()}; {time.monotonic() - started:.0f} s "
             "in all.", "",
             "| z and y from | hit rate | reference molecules among hits | unique among hits | "
             "new distinct hits | over the prior's distinct hits |", "|---|---:|---:|---:|---:|---:|"]
    for label, hit, refs, unique, new, _ in rows:
        lines.append(f"| {label} | {100 * hit:.1f}% | {100 * refs:.1f}% | {100 * unique:.1f}% | "
                     f"{100 * new:.1f}% | {new / max(base, 1e-9):.1f}x |")
    lines += ["", f"The prior's distinct hits (reference molecules included) are {100 * base:.1f}% "
              f"of its draws: five times that needs {500 * base:.0f}% of the draws to be new "
              "distinct hits."]
    with open(args.report, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
