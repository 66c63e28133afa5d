"""The gradient doctor: the classic ``tape.gradient -> [None, ...]`` bug turned into a guard.

For a model configuration it runs one batch of the real training loss (``train.compute_losses``)
eagerly, in ``tf.function`` and in ``tf.function(jit_compile=True)``, for every decoder input
mode and z conditioning, and classifies the gradient of every trainable variable as ``ok``,
``None`` (not connected to the loss), ``zero`` (connected but exactly zero) or ``non-finite``.
It also checks that eager and compiled runs give the same loss for the same seed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

from seqvae.config import DECODER_INPUTS, Z_CONDITIONINGS, Config
from seqvae.model.vae import SequenceVAE, precision_policy
from seqvae.model.precision import resolve_precision

EXECUTIONS = ("eager", "tf.function", "xla")


@dataclass
class GradientReport:
    """Result for one (decoder input, z conditioning, execution)."""

    decoder_input: str
    z_conditioning: str
    execution: str
    precision: str
    loss: float
    variables: int
    problems: dict[str, str] = field(default_factory=dict)  # variable path -> None/zero/non-finite
    loss_matches_eager: bool = True

    @property
    def ok(self) -> bool:
        return not self.problems and self.loss_matches_eager


def classify_gradient(gradient) -> str:
    """``ok``, ``None``, ``zero`` or ``non-finite`` for one variable's gradient."""
    if gradient is None:
        return "None"
    values = tf.convert_to_tensor(gradient).numpy()
    if not np.all(np.isfinite(values)):
        return "non-finite"
    if not np.any(values):
        return "zero"
    return "ok"


def example_batch(vocab_size: int, max_len: int, batch_size: int = 4, seed: int = 0) -> tf.Tensor:
    """Random token ids ``(B, T)`` of varied lengths: tokens, ``<eos>``, then ``<pad>``."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((batch_size, max_len), np.int32)
    for row in range(batch_size):
        length = int(rng.integers(max(1, max_len // 2), max_len))
        ids[row, :length] = rng.integers(4, vocab_size, size=length)
        ids[row, length] = 2
    return tf.constant(ids)


def check_model_gradients(model, loss_fn, ids: tf.Tensor, executions=EXECUTIONS,
                          rtol: float = 1e-4, mode: tuple[str, str, str] = ("custom", "-", "float32")
                          ) -> list[GradientReport]:
    """Classifies the gradient of every trainable variable of any model for any loss.

    Args:
      model: a Keras model (or anything with ``trainable_variables``).
      loss_fn: ``(model, ids, step) -> scalar loss``, the user's own training objective.
      ids: one example batch.
      executions: any of ``eager``, ``tf.function``, ``xla``.
      rtol: how close the compiled losses must be to the eager one.
      mode: ``(decoder_input, z_conditioning, precision)`` for the report's labels.

    Returns:
      One ``GradientReport`` per execution; ``ok`` is False if a variable's gradient is None
      (its path to the loss is cut, e.g. by ``tf.Variable.assign``), zero or not finite, or
      a compiled loss differs from the eager loss.
    """
    variables = model.trainable_variables

    def loss_and_gradients(batch, step):
        with tf.GradientTape() as tape:
            loss = loss_fn(model, batch, step)
        return loss, tape.gradient(loss, variables)

    runners = {"eager": loss_and_gradients,
               "tf.function": tf.function(loss_and_gradients, autograph=False),
               "xla": tf.function(loss_and_gradients, jit_compile=True, autograph=False)}
    reports, eager_loss = [], None
    step = tf.constant(1, tf.int64)
    for execution in executions:
        loss, gradients = runners[execution](ids, step)
        loss = float(loss)
        eager_loss = loss if eager_loss is None else eager_loss
        problems = {}
        for variable, gradient in zip(variables, gradients):
            verdict = classify_gradient(gradient)
            if verdict != "ok":
                problems[variable.path] = verdict
        reports.append(GradientReport(mode[0], mode[1], execution, mode[2], loss, len(variables),
                                      problems,
                                      abs(loss - eager_loss) <= rtol * max(1.0, abs(eager_loss))))
    return reports


def check_gradients(config: Config, ids: tf.Tensor, vocab_size: int,
                    executions=EXECUTIONS, rtol: float = 1e-4, grammar=None
                    ) -> list[GradientReport]:
    """``check_model_gradients`` of a fresh SequenceVAE for ``config`` and seqvae's objective;
    ``grammar``: the vocabulary's ``SmilesGrammar``, needed when the decoder reads it."""
    from seqvae.data.properties import parse_property_names
    from seqvae.training.objective import compute_losses

    names = parse_property_names(config.data.properties) if config.data.properties else ()
    with precision_policy(resolve_precision(config.train.precision)):
        model = SequenceVAE(config.model, vocab_size, int(ids.shape[1]), num_properties=len(names),
                            grammar=grammar if config.model.grammar_features else None
                            ).build_weights()
    # Force KL and the rest of the objective on (a weight of 0 at step 0 would hide KL paths).
    tcfg = dataclasses.replace(config.train, kl_schedule="constant",
                               kl_weight_end=max(config.train.kl_weight_end, 0.1),
                               property_weight=max(config.train.property_weight, 0.5))
    targets = None
    if names:  # standardised targets, one unknown: the head's loss skips it
        values = np.random.default_rng(0).standard_normal((int(ids.shape[0]), len(names)))
        values[0, 0] = np.nan
        targets = tf.constant(values, tf.float32)
    label = config.model.decoder_input + ("+grammar" if config.model.grammar_features else "")
    return check_model_gradients(
        model, lambda model, batch, step: compute_losses(model, batch, step, tcfg, 1,
                                                         targets=targets)["loss"],
        ids, executions, rtol,
        (label, config.model.z_conditioning, resolve_precision(config.train.precision)))


# Molecules for the doctor's SMILES batches: rings, branches, aromatic and charged atoms, Cl/Br.
EXAMPLE_SMILES = ("CC(=O)Nc1ccc(O)cc1", "Clc1ccc(Br)cc1C#N", "C1CCN(CC1)C(=O)[O-]",
                  "CC(C)Cc1ccc(cc1)C(C)C(=O)O", "c1ccc2[nH]ccc2c1", "CCO")


def example_inputs(config: Config, vocab=None, tokenizer: str | None = None,
                   max_len: int = 24, batch_size: int = 4) -> tuple[object, str, tf.Tensor]:
    """The doctor's vocabulary, tokenizer and batch ``(B, T)`` of ids.

    SMILES configurations get real molecules (``EXAMPLE_SMILES``, in Kekule form for Kekule
    runs) encoded with ``vocab`` (a run's ``Vocabulary``) or a vocabulary fitted to them, so
    that a decoder reading the grammar sees real grammar states; other runs get random ids of a
    30-token vocabulary (or of ``vocab``).
    """
    from seqvae.data.preparation import TextCodec, encode_texts, to_model_notation
    from seqvae.data.tokenizers import get_tokenizer
    from seqvae.data.vocabulary import Vocabulary

    tokenizer = tokenizer or config.data.tokenizer
    kekule = config.data.kekule
    if tokenizer == "smiles":
        if vocab is None:
            texts = [to_model_notation(text, "smiles", kekule) for text in EXAMPLE_SMILES]
            token_lists = [get_tokenizer("smiles").tokenize(text) for text in texts]
            vocab = Vocabulary.fit(token_lists)
            max_len = max(max_len, max(map(len, token_lists)) + 1)
        codec = TextCodec(vocab, "smiles", max_len, kekulize=kekule)
        encoded = encode_texts(codec, EXAMPLE_SMILES, on_error="skip")
        if len(encoded.ids) >= 2:
            ids = encoded.ids[:batch_size, :int(encoded.lengths[:batch_size].max())]
            return vocab, tokenizer, tf.constant(ids)
    vocab = vocab or Vocabulary([str(i) for i in range(26)])
    return vocab, tokenizer, example_batch(len(vocab), max_len, batch_size)


def doctor(config: Config, vocab=None, tokenizer: str | None = None,
           max_len: int = 24, batch_size: int = 4, all_modes: bool = True,
           executions=EXECUTIONS, precisions: tuple[str, ...] | None = None
           ) -> list[GradientReport]:
    """Runs ``check_gradients`` for every decoder input mode x z conditioning (or just
    ``config``'s) and every precision in ``precisions`` (default: the config's own).

    Args:
      config: the model and objective to check (dropout and word dropout as configured).
      vocab: a run's ``Vocabulary``; None = one that fits ``config`` (``example_inputs``).
      tokenizer: the run's tokenizer; None = ``config.data.tokenizer``.
      max_len: the longest batch (random batches) or the least padded length (SMILES).

    A decoder that reads the SMILES grammar (``model.grammar_features``) is checked with it under
    teacher forcing, its only mode; the other decoder inputs are checked without it.
    """
    from seqvae.model.grammar import grammar_for

    vocab, tokenizer, ids = example_inputs(config, vocab, tokenizer, max_len, batch_size)
    grammar = grammar_for(vocab.tokens, tokenizer) if config.model.grammar_features else None
    combos = ([(d, z) for d in DECODER_INPUTS for z in Z_CONDITIONINGS] if all_modes
              else [(config.model.decoder_input, config.model.z_conditioning)])
    reports = []
    for precision in precisions or (resolve_precision(config.train.precision),):
        for decoder_input, z_conditioning in combos:
            model = dataclasses.replace(
                config.model, decoder_input=decoder_input, z_conditioning=z_conditioning,
                grammar_features=config.model.grammar_features and grammar is not None
                and decoder_input == "teacher_forcing")
            variant = dataclasses.replace(
                config, model=model, train=dataclasses.replace(
                    config.train, precision=precision,
                    scheduled_sampling=0.0 if model.grammar_features else
                    config.train.scheduled_sampling))
            reports.extend(check_gradients(variant, ids, len(vocab), executions,
                                           rtol=1e-4 if precision == "float32" else 2e-2,
                                           grammar=grammar))
    return reports


def check_head_gradients(head, latent_dim: int, executions=EXECUTIONS, batch_size: int = 8
                         ) -> list[GradientReport]:
    """``check_model_gradients`` of a fitted property head (``seqvae fit-properties``): its MSE on
    random standardised targets from random z ``(B, L)``."""
    from seqvae.model.property_head import property_loss

    rng = np.random.default_rng(0)
    z = tf.constant(rng.standard_normal((batch_size, latent_dim)), tf.float32)
    targets = tf.constant(rng.standard_normal((batch_size, len(head.names))), tf.float32)
    return check_model_gradients(
        head.model, lambda model, batch, step: property_loss(targets, model(batch, training=True)),
        z, executions, mode=("property head", "-", "float32"))


def format_reports(reports: list[GradientReport]) -> str:
    """A table: one line per (mode, conditioning, execution), then each problem variable."""
    lines = [f"{'decoder input':<24} {'z cond.':<7} {'execution':<11} {'precision':<14} "
             f"{'loss':>10}  gradients"]
    for r in reports:
        status = (f"OK ({r.variables}/{r.variables} variables)" if not r.problems else
                  f"FAIL ({r.variables - len(r.problems)}/{r.variables} ok)")
        if not r.loss_matches_eager:
            status += "  LOSS DIFFERS FROM EAGER"
        lines.append(f"{r.decoder_input:<24} {r.z_conditioning:<7} {r.execution:<11} "
                     f"{r.precision:<14} {r.loss:>10.6f}  {status}")
        lines.extend(f"    {path}: {verdict}" for path, verdict in r.problems.items())
    bad = sum(not r.ok for r in reports)
    lines.append(f"{len(reports) - bad} of {len(reports)} checks passed" + (
        "" if not bad else "; variables marked None get no gradient: see README 'Why tape.gradient returned None'"))
    return "\n".join(lines)
