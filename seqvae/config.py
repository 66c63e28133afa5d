"""Frozen configuration dataclasses, their JSON/TOML files and ``key=value`` overrides.

Values that come from the data (vocabulary size, maximum length) are not config fields: they are
passed to the model when it is built and saved beside the config in the run directory.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import typing
from dataclasses import dataclass, field
from typing import Any

from seqvae.errors import SeqvaeError

ENCODERS = ("gru", "conv", "dense")
DECODER_INPUTS = ("teacher_forcing", "free_running", "latent_only")
Z_CONDITIONINGS = ("init", "concat", "both")  # how the decoder reads z (the VAE's modes)
LANGUAGE_MODEL = "none"  # model.z_conditioning: the decoder ignores z, a plain language model
PRIORS = ("standard", "aggregate")  # model.prior
KL_SCHEDULES = ("constant", "linear", "sigmoid", "cyclical")
KL_REDUCTIONS = ("per_token", "per_molecule")
LR_SCHEDULES = ("constant", "cosine", "exponential")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16", "auto")
SUBSETS = ("first", "random")
# ``seqvae evaluate``'s model-dependent parts by default: test molecules in the reconstruction
# protocol (10 encodings x 10 decodings each) and test sequences in vae_quality, sized to about a
# minute on 2 CPU cores for a demo-size model; their standard errors are reported beside them.
EVALUATE_RECON_MOLECULES = 100
EVALUATE_QUALITY_SEQUENCES = 1000


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of the encoder, the latent space and the recurrent decoder."""

    encoder: str = "gru"  # gru | conv | dense (flattened one-hot, as in the classic example)
    encoder_units: int = 256  # GRU units per direction, or hidden width of the conv/dense encoders
    encoder_layers: int = 1  # stacked GRU layers (gru) or Conv1D layers (conv)
    encoder_bidirectional: bool = False  # run the GRU encoder both ways and concatenate the states
    conv_filters: int = 9  # filters of each Conv1D layer (chemical VAE: 9, 9, 10)
    conv_kernel_size: int = 9  # kernel width of each Conv1D layer
    latent_dim: int = 128  # size of z
    decoder_units: int = 512  # GRU units of each decoder layer
    decoder_layers: int = 3  # stacked GRU layers in the decoder
    decoder_dropout: float = 0.0  # dropout between decoder layers (training only)
    decoder_input: str = "teacher_forcing"  # teacher_forcing | free_running | latent_only
    z_conditioning: str = "both"  # init (z -> initial states) | concat (z at every step) | both
    #   | none (the decoder ignores z: a language model, the CharRNN control of a VAE)
    init_per_layer: bool = True  # init: one z -> state map per decoder layer (False: one shared, MOSES)
    embedding_dim: int = 0  # learned token embedding size; 0 = fixed one-hot (MOSES default)
    property_head_depth: int = 3  # hidden layers of the property head on z (chemical VAE: 3)
    property_head_width: int = 67  # units of each hidden layer of the property head (67)
    rejection_rounds: int = 0  # SMILES runs without the constrained softmax: prior samples are
    #   drawn by rejection under the grammar (the model conditioned on it), up to this many
    #   rounds, then masked; 0 = decode under the mask (sample/evaluate --rejection overrides)
    prior: str = "standard"  # standard: z ~ N(0, I) | aggregate: after training, the aggregate
    #   posterior of prior_encodings training sequences (seqvae.latent_prior), sampled by default
    prior_encodings: int = 50_000  # training sequences (drawn at random) the aggregate prior holds
    grammar_features: bool = False  # SMILES: the grammar's state (open rings and branches, pending
    #   bond, valence left, previous token class) is an input of the decoder at every step
    prior_widen: float = 1.6  # aggregate: factor on each posterior's standard deviation (1 = q(z|x))

    def __post_init__(self) -> None:
        _check_choice("model.encoder", self.encoder, ENCODERS)
        _check_choice("model.decoder_input", self.decoder_input, DECODER_INPUTS)
        _check_choice("model.z_conditioning", self.z_conditioning,
                      Z_CONDITIONINGS + (LANGUAGE_MODEL,))
        if self.z_conditioning == LANGUAGE_MODEL and self.decoder_input == "latent_only":
            raise SeqvaeError("model.z_conditioning=none leaves a latent_only decoder no input")
        for name in ("encoder_units", "encoder_layers", "latent_dim", "decoder_units",
                     "decoder_layers", "conv_filters", "conv_kernel_size"):
            if getattr(self, name) < 1:
                raise SeqvaeError(f"model.{name} must be at least 1, got {getattr(self, name)}")
        if not 0.0 <= self.decoder_dropout < 1.0:
            raise SeqvaeError(f"model.decoder_dropout must be in [0, 1), got {self.decoder_dropout}")
        if self.property_head_depth < 0 or self.property_head_width < 1:
            raise SeqvaeError("model.property_head_depth must be >= 0 and model.property_head_width >= 1")
        if self.rejection_rounds < 0:
            raise SeqvaeError("model.rejection_rounds must be >= 0 (0 = sample under the mask)")
        if self.embedding_dim < 0:
            raise SeqvaeError("model.embedding_dim must be 0 (one-hot) or a positive size")
        _check_choice("model.prior", self.prior, PRIORS)
        if self.prior_encodings < 1 or not self.prior_widen > 0:
            raise SeqvaeError("model.prior_encodings must be >= 1 and model.prior_widen > 0")


@dataclass(frozen=True)
class DataConfig:
    """How sequences are read, tokenized, split and batched."""

    tokenizer: str = "smiles"  # smiles | selfies | char | word (arrays, .npy: always word, their
    #   class ids; Config.for_class_ids)
    column: str = "SMILES"  # column read from .csv/.tsv files
    max_len: int = 0  # longest sequence in tokens incl. <eos>; 0 = derive from the training data
    limit: int = 0  # use only N sequences (0 = all): the first N, or N drawn at random (subset)
    subset: str = "first"  # first | random: which data.limit sequences (random: a draw seeded by
    #   train.seed, kept in file order; for files in some order, MOSES's among them)
    validation_fraction: float = 0.05  # held out for the per-epoch validation pass
    bucket: bool = True  # length-bucketed batches (sequences of similar length batched together)
    bucket_width: int = 0  # pad batches to a multiple of this; 0 = auto (Config.bucket_width)
    skip_invalid: bool = True  # skip lines that fail to parse (SMILES) instead of failing
    streaming: bool = False  # stream text shards (globs, .gz) through tf.data instead of loading them
    kekulize: bool = False  # SMILES runs model Kekule SMILES (explicit double bonds, no aromatic
    #   atoms); no effect on other tokenizers or streamed corpora (see kekule)
    properties: str = ""  # properties trained jointly by a head on z, e.g. "logp,qed,sa" or
    #   "col:pIC50" (seqvae.data.properties); "" = none (fit one later: seqvae fit-properties)

    def __post_init__(self) -> None:
        _check_choice("data.subset", self.subset, SUBSETS)
        if not 0.0 <= self.validation_fraction < 1.0:
            raise SeqvaeError("data.validation_fraction must be in [0, 1)")
        if self.max_len < 0 or self.limit < 0 or self.bucket_width < 0:
            raise SeqvaeError("data.max_len, data.limit and data.bucket_width must be >= 0")

    @property
    def lines_read(self) -> int:
        """How many lines to read from the source (0 = all): ``limit`` when the first lines are
        wanted; all of them when ``limit`` rows are then drawn at random."""
        return self.limit if self.subset == "first" else 0

    @property
    def kekule(self) -> bool:
        """Whether the run models Kekule SMILES: ``kekulize`` on a SMILES run that is not
        streamed (streaming tokenizes in the graph, and Kekule conversion is RDKit code)."""
        return self.kekulize and self.tokenizer == "smiles" and not self.streaming


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation, KL policy and the length of the run."""

    batch_size: int = 512  # sequences per step
    epochs: int = 10  # passes over the training split (max_steps / time_budget may stop sooner;
    #   0 = no epoch limit: max_steps or time_budget bounds the run)
    max_steps: int = 0  # stop after this many optimizer steps in total (0 = no limit)
    time_budget: float = 0.0  # stop after this many seconds of training (0 = no limit)
    learning_rate: float = 3e-4  # peak Adam learning rate
    lr_schedule: str = "constant"  # constant | cosine (to lr_min over the run) | exponential
    lr_min: float = 3e-5  # final learning rate of cosine, floor of exponential
    lr_decay_steps: int = 1000  # exponential: steps for one factor of lr_decay_rate
    lr_decay_rate: float = 0.5  # exponential: multiplicative decay per lr_decay_steps
    warmup_steps: int = 0  # linear learning-rate warm-up
    clip_norm: float = 50.0  # global gradient-norm clip (MOSES: 50); 0 = off
    kl_schedule: str = "linear"  # constant | linear | sigmoid | cyclical
    kl_weight_start: float = 0.0  # KL weight at kl_start_step
    kl_weight_end: float = 0.05  # KL weight after the schedule (MOSES: 0.05)
    kl_start_step: int = 0  # schedule starts here (weight_start before)
    kl_anneal_steps: int = 2000  # steps from start to end weight (one cycle for cyclical)
    kl_anneal_fraction: float = 0.0  # > 0: anneal over this fraction of the planned run instead
    kl_reduction: str = "per_token"  # per_token: recon per token + kl_weight * KL per molecule
    #   (MOSES; the beta per molecule is kl_weight times the molecule's tokens) | per_molecule:
    #   recon summed per molecule, so kl_weight is the ELBO's beta whatever the length
    kl_cycles: int = 4  # cyclical: number of cycles
    free_bits: float = 0.0  # nats per latent dimension not penalised (0 = off)
    word_dropout: float = 0.0  # teacher forcing: prob. of replacing a decoder input by <unk>
    scheduled_sampling: float = 0.0  # teacher forcing: prob., reached at the end of the run
    #   (linear from 0), of replacing a decoder input by the model's own draw at the step before
    #   (Bengio et al. 2015, in two passes: Duckworth et al. 2019); 0 = off
    grammar_softmax: bool = False  # SMILES runs (no effect on others): the decoder's softmax is
    #   over the tokens the grammar mask allows after each prefix (trained as it samples)
    property_weight: float = 0.5  # weight of the property head's MSE against the per-token
    #   cross-entropy (data.properties; chemical VAE 0.5; per_molecule scales it by tokens/molecule)
    patience: int = 0  # stop after this many validations without a better val loss (0 = off)
    validate_every: int = 0  # steps between validation passes (0 = at each epoch end)
    restore_best: bool = False  # end with the weights of the best validation pass (kept in
    #   RUN_DIR/best/) instead of the last step's (seqvae finetune's choice)
    jit_compile: bool = False  # compile the train step with XLA
    precision: str = "float32"  # float32 | mixed_bfloat16 | mixed_float16 | auto (mixed_bfloat16
    #   on CPUs with AVX512-BF16 or AMX, else float32; seqvae.model.precision)
    seed: int = 0  # seeds data order, reparametrization noise, dropout and initial weights
    log_every: int = 50  # steps between metrics.jsonl lines
    checkpoint_every: int = 500  # steps between checkpoints (and at every epoch end)
    keep_checkpoints: int = 3  # checkpoints kept by the CheckpointManager
    export_at_end: bool = True  # write RUN_DIR/saved_model (seqvae export) when training ends
    max_nonfinite_steps: int = 10  # stop after this many consecutive steps with a NaN/inf loss or
    #   gradient (each is skipped: it never reaches the weights or a checkpoint)

    def __post_init__(self) -> None:
        _check_choice("train.kl_schedule", self.kl_schedule, KL_SCHEDULES)
        _check_choice("train.lr_schedule", self.lr_schedule, LR_SCHEDULES)
        _check_choice("train.precision", self.precision, PRECISIONS)
        _check_choice("train.kl_reduction", self.kl_reduction, KL_REDUCTIONS)
        if not 0.0 <= self.kl_anneal_fraction <= 1.0:
            raise SeqvaeError("train.kl_anneal_fraction must be in [0, 1]")
        if self.batch_size < 1 or not self.learning_rate > 0:  # `not >` also rejects NaN
            raise SeqvaeError("train.batch_size must be >= 1 and train.learning_rate > 0")
        if not 0.0 <= self.word_dropout < 1.0:
            raise SeqvaeError("train.word_dropout must be in [0, 1)")
        if not 0.0 <= self.scheduled_sampling <= 1.0:
            raise SeqvaeError("train.scheduled_sampling must be in [0, 1]")
        # The loop divides by these (step % log_every, run length / kl_cycles, ...).
        for name in ("log_every", "checkpoint_every", "keep_checkpoints", "kl_cycles", "lr_decay_steps",
                     "max_nonfinite_steps"):
            if getattr(self, name) < 1:
                raise SeqvaeError(f"train.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("epochs", "max_steps", "time_budget", "lr_min", "warmup_steps", "clip_norm",
                     "kl_weight_start", "kl_weight_end", "kl_start_step", "kl_anneal_steps",
                     "free_bits", "patience", "validate_every", "property_weight"):
            if not getattr(self, name) >= 0:
                raise SeqvaeError(f"train.{name} must be >= 0, got {getattr(self, name)}")
        if not (self.epochs or self.max_steps or self.time_budget):
            raise SeqvaeError("train.epochs, train.max_steps and train.time_budget are all 0: "
                              "nothing would end the run; set one of them")
        if not 0.0 < self.lr_decay_rate <= 1.0:
            raise SeqvaeError(f"train.lr_decay_rate must be in (0, 1], got {self.lr_decay_rate}")


@dataclass(frozen=True)
class Config:
    """Everything that defines a run; saved as ``config.json`` in the run directory."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self):
        if not self.model.grammar_features:
            return
        if self.data.tokenizer != "smiles":
            raise SeqvaeError("model.grammar_features reads the SMILES grammar: it needs "
                              f"data.tokenizer=smiles, got {self.data.tokenizer!r}")
        if self.model.decoder_input != "teacher_forcing" or self.train.scheduled_sampling > 0:
            raise SeqvaeError("model.grammar_features reads the grammar's state after the true "
                              "tokens: it needs model.decoder_input=teacher_forcing and "
                              "train.scheduled_sampling=0")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def bucket_width(self) -> int:
        """The batch padding multiple: ``data.bucket_width``, or for 0 (auto) 1 (exact lengths:
        1% padding on MOSES instead of 10% at width 8, and as much less compute) unless every new
        batch shape costs a compilation (``train.jit_compile``) or streaming buckets batches by
        length range (``data.streaming``): 8 then."""
        if self.data.bucket_width:
            return self.data.bucket_width
        return 8 if self.train.jit_compile or self.data.streaming else 1

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> "Config":
        """Builds a config, rejecting unknown sections/keys and values of the wrong type."""
        if not isinstance(values, dict):
            raise SeqvaeError(f"{source}: expected a table of sections, got {type(values).__name__}")
        sections = {f.name: f.type for f in dataclasses.fields(cls)}
        built = {}
        for section, entries in values.items():
            if section not in sections:
                raise SeqvaeError(f"{source}: unknown section {section!r} "
                                  f"(expected one of: {', '.join(sections)})")
            section_cls = _SECTION_TYPES[section]
            if not isinstance(entries, dict):
                raise SeqvaeError(f"{source}: section {section!r} must be a table")
            built[section] = _build_section(section_cls, section, entries, source)
        return cls(**built)

    def with_overrides(self, overrides: list[str]) -> "Config":
        """Applies ``section.key=value`` strings (``--set``) and returns a new config."""
        values = self.to_dict()
        for item in overrides:
            key, sep, raw = item.partition("=")
            section, dot, name = key.strip().partition(".")
            if not sep or not dot:
                raise SeqvaeError(f"--set {item!r}: expected section.key=value, e.g. model.latent_dim=64")
            if section not in _SECTION_TYPES:
                raise SeqvaeError(f"--set {item!r}: unknown section '{section}' "
                                  f"(expected one of: {', '.join(_SECTION_TYPES)})")
            hints = typing.get_type_hints(_SECTION_TYPES[section])
            if name not in hints:
                raise SeqvaeError(f"--set {item!r}: unknown key '{name}' in section '{section}' "
                                  f"(known: {', '.join(hints)})")
            values[section][name] = _parse_value(raw.strip(), hints[name], f"--set {key}")
        explicit = {item.partition("=")[0].strip() for item in overrides}
        if values["data"]["tokenizer"] != "smiles" and "model.grammar_features" not in explicit:
            # A preset's SMILES-only decoder input has no grammar to read in another notation
            # (one-hot arrays, char, word, SELFIES): off, unless asked for by name (an error).
            values["model"]["grammar_features"] = False
        return Config.from_dict(values, source="--set")

    def for_class_ids(self) -> "Config":
        """The config for data given as arrays (one-hot ``(N, T, C)`` or class ids ``(N, T)``):
        the class ids are the tokens (``data.tokenizer=word``, as the array's classes become
        the words ``0``, ``1``, ...), so nothing SMILES-only applies (Kekule form, the grammar and
        the decoder input read from it)."""
        return self.with_overrides(["data.tokenizer=word"])


_SECTION_TYPES = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig}


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise SeqvaeError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


def _build_section(section_cls: type, section: str, entries: dict, source: str) -> Any:
    hints = typing.get_type_hints(section_cls)
    kwargs = {}
    for name, value in entries.items():
        if name not in hints:
            raise SeqvaeError(f"{source}: unknown key {f'{section}.{name}'!r} "
                              f"(known: {', '.join(hints)})")
        kwargs[name] = _coerce(value, hints[name], f"{source}: {section}.{name}")
    return section_cls(**kwargs)


def _coerce(value: Any, kind: type, where: str) -> Any:
    """Checks a JSON/TOML value against a field type (ints are accepted for floats)."""
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and _finite(value):
            return float(value)
    elif kind is str:
        if isinstance(value, str):
            return value
    raise SeqvaeError(f"{where} must be of type {kind.__name__}, got {value!r}")


def _finite(value: int | float) -> bool:
    """math.isfinite, False for integers too large for a float (10**400 in a JSON file)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _parse_value(raw: str, kind: type, where: str) -> Any:
    """Parses a command-line string into a field's type."""
    if kind is str:
        return raw
    if kind is bool:
        lowered = raw.lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise SeqvaeError(f"{where}: expected true or false, got {raw!r}")
    try:
        value = kind(raw)
    except ValueError:
        raise SeqvaeError(f"{where}: expected {kind.__name__}, got {raw!r}") from None
    if kind is float and not math.isfinite(value):
        raise SeqvaeError(f"{where}: expected a finite number, got {raw!r}")
    return value


def load_config(path: str | os.PathLike) -> Config:
    """Reads a config from a ``.json`` or ``.toml`` file; missing keys take their defaults."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as error:
        raise SeqvaeError(f"{path}: cannot read config file ({error.strerror})") from None
    try:
        if path.endswith(".toml"):
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib
            values = tomllib.loads(raw.decode("utf-8"))
        else:
            values = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise SeqvaeError(f"{path}: config file is not UTF-8 text") from None
    except ValueError as error:
        raise SeqvaeError(f"{path}: not valid {'TOML' if path.endswith('.toml') else 'JSON'}: "
                          f"{str(error).splitlines()[0]}") from None
    return Config.from_dict(values, source=path)


STOP_FIELDS = ("train.epochs", "train.max_steps", "train.time_budget",  # how long, not what
               "train.max_nonfinite_steps")


def config_differences(stored: Config, given: Config, ignore: tuple[str, ...] = STOP_FIELDS
                       ) -> list[str]:
    """``section.key: stored X, given Y`` for each field that differs, except ``ignore``."""
    stored_values, given_values = stored.to_dict(), given.to_dict()
    return [f"{section}.{key}: stored {value!r}, given {given_values[section][key]!r}"
            for section, fields in stored_values.items() for key, value in fields.items()
            if f"{section}.{key}" not in ignore and given_values[section][key] != value]
