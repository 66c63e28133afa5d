"""Export a run as a TensorFlow SavedModel that serves without seqvae installed.

Signatures (tokenization and detokenization happen inside the graph):

- ``encode(sequences: string[N]) -> {z_mean, z_log_var}: float32[N, latent_dim]``
- ``decode(z: float32[N, latent_dim]) -> {sequences: string[N]}`` (greedy)
- ``sample(n: int32, temperature: float32, seed: int64) -> {sequences: string[N]}``, with
  ``0 <= n <= MAX_SAMPLE_N`` (10,000: one request cannot make the server allocate without bound;
  ask again with other seeds for more) and a finite temperature; anything else is an
  ``InvalidArgumentError`` for that request, and the server carries on.
- ``complete(prefixes: string[N], temperature: float32, seed: int64) -> {sequences: string[N]}``:
  row i begins with ``prefixes[i]`` (in the run's notation; "" for none) and the decoder
  completes it from a z of the prior, under the grammar mask for SMILES runs
  (``decoding.forced_prefix_step_fn``). A scaffold written to end at an attachment point (Kekule
  SMILES for a Kekule run: ``seqvae.conditional.rooted_smiles``) comes back decorated, as
  ``seqvae sample --scaffold`` decorates it. What ``sample --where/--scaffold`` adds is outside
  the graph: RDKit's checks (properties, substructure matches, validity), writing a scaffold as
  rooted SMILES, and the search that steers z by what it has found; a client checks what
  ``complete`` returns with RDKit itself.

Strings are in the run's notation (``module.notation``): SMILES, characters or words, and
**SELFIES for SELFIES runs**, in and out; decoded and sampled strings are the model's own
(Kekule SMILES for a ``kekule_smiles`` run), not RDKit's canonical SMILES that seqvae's commands
print (a client canonicalizes with ``Chem.MolToSmiles(Chem.MolFromSmiles(s))``). ``encode``
refuses, with an ``InvalidArgumentError`` that names the expected notation and the inputs, a
text holding a token the vocabulary lacks (SMILES sent to a SELFIES or Kekule export among
them) or longer than the run's ``max_len``. SMILES <-> SELFIES conversion is Python code
(``selfies``), which a SavedModel cannot carry; seqvae's own API converts for its users, so a
client of a SELFIES export converts with ``selfies.encoder`` / ``selfies.decoder``. Likewise a
``data.kekulize`` run (notation ``kekule_smiles``) encodes Kekule SMILES (RDKit:
``Chem.MolToSmiles(mol, kekuleSmiles=True)`` after ``Chem.Kekulize(mol, clearAromaticFlags=True)``);
what it decodes is ordinary SMILES.

SMILES runs decode under the grammar mask (``seqvae.model.grammar``), in the graph, as
seqvae's own decoding does by default; a run that samples by rejection under the grammar
(``model.rejection_rounds``, the demo) does so in ``sample`` too, its rounds unrolled in the
graph (``seqvae.inference.rejection_sample``); a run trained with ``model.prior=aggregate`` (the
demo) draws z from its aggregate posterior (``seqvae.latent_prior``), held as two variables of the
SavedModel. ``sample`` equals
``seqvae.inference.sample(run, n, temperature=..., seed=...)`` for
``n <= 1000`` (one decoding batch), and ``decode``/``encode`` equal ``inference.decode`` /
``inference.encode``. Serve it with TensorFlow Serving, e.g.::

    docker run -p 8501:8501 -v "$PWD/runs/demo/saved_model:/models/seqvae/1" \
        -e MODEL_NAME=seqvae tensorflow/serving
    curl -d '{"signature_name": "sample", "inputs": {"n": 5, "temperature": 1.0, "seed": 0}}' \
        localhost:8501/v1/models/seqvae:predict
"""

from __future__ import annotations

import os
import shutil
import tempfile

import tensorflow as tf

from seqvae import inference, latent_prior
from seqvae.data.graph_tokenizers import graph_tokenize, lookup_table
from seqvae.data.vocabulary import EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID
from seqvae.errors import SeqvaeError
from seqvae.model import decoding, randomness
from seqvae.run import Run, load_run


MAX_SAMPLE_N = 10_000  # most sequences one ``sample`` request may ask for
# What each ``notation`` is, for the errors of the ``encode`` signature.
NOTATION_NAMES = {
    "smiles": "SMILES", "word": "words separated by spaces", "char": "characters",
    "selfies": "SELFIES (convert SMILES with selfies.encoder)",
    "kekule_smiles": "Kekule SMILES (RDKit: Chem.Kekulize(mol, clearAromaticFlags=True), then "
                     "Chem.MolToSmiles(mol, kekuleSmiles=True))"}


class ExportModule(tf.Module):
    """The model, its vocabulary and its tokenizer as one graph."""

    def __init__(self, run: Run):
        super().__init__()
        # The Keras model is kept out of the object graph (Keras would add its own serving
        # signature, traced with float inputs); its variables are tracked instead.
        object.__setattr__(self, "model", run.model)
        self.model_variables = list(run.model.variables)
        self.tokenizer = run.info["tokenizer"]
        notation = "kekule_smiles" if run.config.data.kekule else self.tokenizer
        self._notation = notation
        self.notation = tf.Variable(notation, trainable=False, name="notation")  # of the strings
        if self.tokenizer not in ("smiles", "selfies", "char", "word"):
            raise SeqvaeError(f"cannot export tokenizer {self.tokenizer!r}")
        self.max_len = run.max_len
        # SMILES runs decode under the grammar mask, as seqvae's own decoding does; its tables
        # become constants of the traced signatures (kept out of the object graph).
        object.__setattr__(self, "grammar", run.grammar)
        self.rejection_rounds = inference.rejection_rounds(run)
        self.latent_dim = run.config.model.latent_dim
        # model.prior=aggregate: ``sample`` draws z from the run's aggregate posterior, as
        # seqvae's own sampling does by default (``inference.run_prior``)
        self.prior_means = self.prior_scales = None
        if inference.run_prior(run) == "fitted":
            prior = inference.loaded_prior(run)
            if not isinstance(prior, latent_prior.AggregatePrior):
                raise SeqvaeError(f"{run.run_dir}: model.prior=aggregate, but latent_prior.npz "
                                  "holds a fitted mixture (seqvae fit-prior --components), which "
                                  "a SavedModel cannot carry; restore the run's own with "
                                  f"'seqvae fit-prior {run.run_dir} --aggregate'")
            self.prior_means = tf.Variable(prior.means, trainable=False, name="prior_means")
            self.prior_scales = tf.Variable(prior.scales, trainable=False, name="prior_scales")
        tokens = run.vocab.tokens
        self.tokens = tf.constant(tokens)
        self.table = lookup_table(run.vocab)
        self.encode = tf.function(self._encode, input_signature=[tf.TensorSpec([None], tf.string)],
                                  autograph=False)
        self.decode = tf.function(self._decode, input_signature=[
            tf.TensorSpec([None, self.latent_dim], tf.float32)], autograph=False)
        self.sample = tf.function(self._sample, input_signature=[
            tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.int64)],
            autograph=False)
        self.complete = tf.function(self._complete, input_signature=[
            tf.TensorSpec([None], tf.string), tf.TensorSpec([], tf.float32),
            tf.TensorSpec([], tf.int64)], autograph=False)

    def _checked_tokens(self, sequences: tf.Tensor, room: int, signature: str):
        """Token ids (ragged ``(N, None)``) of ``sequences (N,)`` after checks that raise an
        ``InvalidArgumentError`` naming the inputs and the notation expected for a text with a
        token the vocabulary lacks (a SMILES string sent to a SELFIES or a Kekule export, say)
        or with more than ``max_len - room`` tokens."""
        tokens = graph_tokenize(sequences, self.tokenizer)
        ids = tf.cast(tf.ragged.map_flat_values(self.table.lookup, tokens), tf.int32)
        unknown = tf.reduce_any(tf.equal(ids, UNK_ID), axis=1)
        too_long = ids.row_lengths() > self.max_len - room
        notation = NOTATION_NAMES[self._notation]
        checks = [
            tf.debugging.Assert(tf.logical_not(tf.reduce_any(unknown)), [
                f"{signature}: the model reads {notation}; these inputs hold tokens its "
                "vocabulary lacks:", tf.boolean_mask(sequences, unknown)], summarize=5),
            tf.debugging.Assert(tf.logical_not(tf.reduce_any(too_long)), [
                f"{signature}: the model reads at most {self.max_len - room} tokens of "
                f"{notation}; these inputs are longer:", tf.boolean_mask(sequences, too_long)],
                summarize=5)]
        with tf.control_dependencies(checks):
            return tf.ragged.map_flat_values(tf.identity, ids)

    def _ids(self, sequences: tf.Tensor) -> tf.Tensor:
        """Token ids ``(N, max_len)`` of ``sequences (N,)``, ``<eos>`` ended (``_checked_tokens``:
        room is left for the ``<eos>``)."""
        ids = self._checked_tokens(sequences, 1, "encode")
        ids = tf.concat([ids, tf.fill([tf.shape(sequences)[0], 1], EOS_ID)], axis=1)
        dense = ids.to_tensor(default_value=PAD_ID)
        return tf.pad(dense, [[0, 0], [0, self.max_len - tf.shape(dense)[1]]])

    def _encode(self, sequences):
        z_mean, z_log_var = self.model.encoder(self._ids(sequences), training=False)
        return {"z_mean": z_mean, "z_log_var": z_log_var}

    def _texts(self, ids: tf.Tensor) -> tf.Tensor:
        keep = tf.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=1, exclusive=True) == 0
        keep &= ids >= len(SPECIAL_TOKENS)  # no <pad>, <bos>, <eos>; <unk> would print as text
        tokens = tf.ragged.boolean_mask(tf.gather(self.tokens, ids), keep)
        return tf.strings.reduce_join(tokens, axis=1, separator=" " if self.tokenizer == "word" else "")

    def _decode_with(self, z, greedy, temperature, seed):
        ids = decoding.sample_from_z(self.model, z, self.max_len, greedy=greedy,
                                     temperature=temperature, seed=seed, grammar=self.grammar,
                                     compiled_mask=False)  # runs where TF has no XLA JIT
        return {"sequences": self._texts(ids)}

    def _decode(self, z):
        return self._decode_with(z, True, 1.0, tf.constant([0, 0]))

    def _sample(self, n, temperature, seed):
        checks = [tf.debugging.assert_non_negative(n, message="sample: n must be >= 0"),
                  tf.debugging.assert_less_equal(
                      n, MAX_SAMPLE_N, message=f"sample: n must be at most {MAX_SAMPLE_N}"),
                  tf.debugging.assert_all_finite(temperature, "sample: temperature must be finite")]
        with tf.control_dependencies(checks):  # before anything is allocated for n
            n, temperature = tf.identity(n), tf.identity(temperature)
        temperature = tf.maximum(temperature, 1e-3)  # 0 or less: (near-)greedy
        base = tf.stack([tf.cast(seed, tf.int32), 0])
        z = self._prior_z(n, base)
        if self.rejection_rounds:
            return {"sequences": self._texts(self._rejection_ids(z, temperature, base))}
        return self._decode_with(z, False, temperature, randomness.fold_in(base, 0))

    def _complete(self, prefixes, temperature, seed):
        """Completions of ``prefixes (N,)`` from prior draws of z: ``inference.decode`` with a
        forced prefix, in the graph (room is left for at least one more token and ``<eos>``)."""
        count = tf.shape(prefixes)[0]
        checks = [tf.debugging.assert_less_equal(count, MAX_SAMPLE_N, message=(
                      f"complete: at most {MAX_SAMPLE_N} prefixes a request")),
                  tf.debugging.assert_all_finite(temperature, "complete: temperature must be "
                                                 "finite")]
        with tf.control_dependencies(checks):
            temperature = tf.maximum(tf.identity(temperature), 1e-3)
        ids = self._checked_tokens(prefixes, 2, "complete")
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        prefix = tf.pad(ids.to_tensor(default_value=PAD_ID), [[0, 0], [0, 1]])  # >= 1 column
        base = tf.stack([tf.cast(seed, tf.int32), 0])
        z = self._prior_z(count, base)
        out = decoding.sample_from_z(self.model, z, self.max_len, greedy=False,
                                     temperature=temperature, seed=randomness.fold_in(base, 0),
                                     grammar=self.grammar, compiled_mask=False, prefix=prefix,
                                     prefix_lengths=lengths)
        return {"sequences": self._texts(out)}

    def _prior_z(self, n, seed):
        """``n`` draws of z from the run's prior: ``inference.prior_draw`` in the graph."""
        eps = decoding.prior_z(n, self.latent_dim, seed)
        if self.prior_means is None:
            return eps
        return decoding.aggregate_z(eps, self.prior_means, self.prior_scales, seed)

    def _rejection_ids(self, z, temperature, base):
        """``inference.rejection_sample`` in the graph, for one decoding batch: the same seeds
        (``decoding.rejection_round_seed``), the same draws a round (``rejection_attempts``),
        the same texts (a later round's draws, at most twice the pending rows, are one batch
        there too while n <= its batch_size). The rounds are unrolled, each
        calling one traced function that decodes without the mask and stops a row at its
        first forbidden token (traced inline, R copies took most of a tiny run's minute of
        export)."""
        def draw(rows_z, seed, temperature, reject):
            return decoding.sample_from_z(self.model, rows_z, self.max_len, greedy=False,
                                          temperature=temperature, seed=seed, grammar=self.grammar,
                                          compiled_mask=False, reject=reject)

        rejecting = tf.function(lambda rows_z, seed, temperature: draw(rows_z, seed, temperature,
                                                                        True), autograph=False)

        ids = tf.zeros([tf.shape(z)[0], self.max_len], tf.int32)
        pending, first = tf.range(tf.shape(z)[0]), None
        for round_ in range(self.rejection_rounds):  # unrolled: R is fixed for the run
            round_base = base if round_ == 0 else decoding.rejection_round_seed(base, round_)
            drawn_z = z if not round_ else self._prior_z(  # the pending rows' draws, and spares
                decoding.rejection_attempts(tf.size(pending), *first), round_base)
            drawn, rejected = rejecting(drawn_z, randomness.fold_in(round_base, 0), temperature)
            if round_:  # the first accepted draws fill the pending rows, in order
                kept = tf.where(~rejected)[:, 0][:tf.size(pending)]
                filled, pending = pending[:tf.size(kept)], pending[tf.size(kept):]
                ids = tf.tensor_scatter_nd_update(ids, filled[:, None], tf.gather(drawn, kept))
                z = tf.tensor_scatter_nd_update(z, pending[:, None], tf.gather(
                    drawn_z, tf.where(rejected)[:, 0][:tf.size(pending)]))  # the masked rest's
            else:
                ids = tf.tensor_scatter_nd_update(ids, tf.boolean_mask(pending, ~rejected)[:, None],
                                                  tf.boolean_mask(drawn, ~rejected))
                first = (tf.reduce_sum(tf.cast(rejected, tf.int32)), tf.size(rejected))
                pending = tf.boolean_mask(pending, rejected)
        masked = draw(tf.gather(z, pending), randomness.fold_in(
            decoding.rejection_round_seed(base, self.rejection_rounds), 0), temperature, False)
        return tf.tensor_scatter_nd_update(ids, pending[:, None], masked)


def export(run_dir: str, out_dir: str) -> str:
    """Writes the SavedModel of ``run_dir`` to ``out_dir`` (atomically: built beside, renamed)."""
    run = load_run(run_dir)
    module = ExportModule(run)
    out_dir = os.path.abspath(out_dir)
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(dir=parent, prefix=".export-")
    try:
        tf.saved_model.save(module, staging, signatures={
            "encode": module.encode, "decode": module.decode, "sample": module.sample,
            "complete": module.complete})
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        os.replace(staging, out_dir)
    except (tf.errors.OpError, OSError) as error:  # a full disk, a read-only folder
        message = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise SeqvaeError(f"cannot write the SavedModel {out_dir} ({message}); the checkpoints "
                          "are intact: fix it and run 'seqvae export' again") from None
    finally:
        if os.path.exists(staging):
            shutil.rmtree(staging)
    return out_dir
