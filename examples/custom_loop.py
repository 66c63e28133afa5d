"""The classic two-model VAE custom training loop, written so that every weight trains.

The setting of the question that started seqvae: one-hot data of shape (batch, 3, 4), a Dense
encoder model (-> mean, log variance, reparametrized z, latent size 5) and a recurrent GRU
decoder model that is run step by step, feeding each step's softmax back in (free running), with
categorical cross-entropy + KL, trained by an explicit ``tf.GradientTape`` loop.

The classic version writes each step's output into a ``tf.Variable`` with ``assign``; the tape
does not record assignments, so ``tape.gradient`` returns None for every decoder weight. Here
the decoder's loop is a ``tf.while_loop`` that writes a ``tf.TensorArray`` (inside
``seqvae.model.Decoder``), and the whole step is a ``tf.function``: every gradient is real.

Run: python examples/custom_loop.py
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from seqvae.config import ModelConfig  # noqa: E402
from seqvae.model import randomness  # noqa: E402
from seqvae.model.decoder import Decoder  # noqa: E402
from seqvae.model.encoder import Encoder  # noqa: E402
from seqvae.model import likelihood  # noqa: E402

BATCH, STEPS, CLASSES, LATENT = 3, 3, 4, 5

rng = np.random.default_rng(0)
one_hot = tf.constant(np.eye(CLASSES, dtype=np.float32)[rng.integers(0, CLASSES, (BATCH, STEPS))])

config = ModelConfig(encoder="dense", encoder_units=32, latent_dim=LATENT, decoder_units=16,
                     decoder_layers=1, decoder_input="free_running", z_conditioning="both")
encoder = Encoder(config, vocab_size=CLASSES, max_len=STEPS)  # a Keras model of its own
decoder = Decoder(config, vocab_size=CLASSES, start_id=None)  # another one; zero start input
optimizer = tf.keras.optimizers.Adam(1e-2)


@tf.function  # graph mode: the decoding loop is a tf.while_loop, not a Python loop
def train_step(x, step):
    seed = randomness.fold_in(randomness.as_seed(0), step)
    with tf.GradientTape(persistent=True) as tape:
        z_mean, z_log_var = encoder(x, training=True)
        z = z_mean + tf.exp(0.5 * z_log_var) * randomness.normal(tf.shape(z_mean), seed)
        logits = decoder(z, num_steps=STEPS, training=True)  # (batch, 3, 4), one step at a time
        recon = likelihood.probability_cross_entropy(x, tf.nn.softmax(logits))
        kl = likelihood.kl_divergence(z_mean, z_log_var)
        loss = recon + 0.1 * kl
    encoder_gradients = tape.gradient(loss, encoder.trainable_weights)
    decoder_gradients = tape.gradient(loss, decoder.trainable_weights)
    del tape
    optimizer.apply(encoder_gradients + decoder_gradients,
                    encoder.trainable_weights + decoder.trainable_weights)
    return loss, encoder_gradients, decoder_gradients


def complete(gradients) -> bool:
    return all(g is not None and bool(tf.reduce_all(tf.math.is_finite(g))) for g in gradients)


loss, encoder_gradients, decoder_gradients = train_step(one_hot, tf.constant(0))
print("Valid Encoder Gradients:", complete(encoder_gradients),
      f"({len(encoder_gradients)} variables)")
print("Valid Decoder Gradients:", complete(decoder_gradients),
      f"({len(decoder_gradients)} variables)")
first = float(loss)
for step in range(1, 300):
    loss, _, _ = train_step(one_hot, tf.constant(step))
print(f"loss {first:.3f} -> {float(loss):.3f} after 300 steps")
assert complete(encoder_gradients) and complete(decoder_gradients)
assert float(loss) < first
