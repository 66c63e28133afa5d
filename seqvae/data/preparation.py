"""Turning texts into the model's token ids: the one path every caller takes.

``encode_texts`` is used by training (``prepare_data``), inference, evaluation and the command
line: it converts SMILES to SELFIES for SELFIES runs, checks molecules with RDKit, tokenizes,
maps tokens to ids with ``<eos>`` and pads. What it cannot encode it either reports with the
source line (``on_error="raise"``) or leaves out and lists (``on_error="skip"``).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from seqvae.config import DataConfig
from seqvae import parallel
from seqvae.data import batching, chemistry, sources
from seqvae.data.moses import is_moses
from seqvae.data.tokenizers import SELFIES_PATTERN, SelfiesTokenizer, get_tokenizer
from seqvae.data.vocabulary import PAD_ID, Vocabulary
from seqvae.errors import SeqvaeError
from seqvae.messages import note

MOLECULE_TOKENIZERS = ("smiles", "selfies")
PARALLEL_MIN = 20_000  # molecules from which RDKit's checks run on every core (worker start ~2 s)
LARGE_FILE = 5 << 20  # bytes from which preparing a file says so before reading it


@dataclass(frozen=True)
class TextCodec:
    """What a run needs to turn texts into ids and back: vocabulary, tokenizer name, length.

    Attributes:
      vocab: the run's vocabulary.
      tokenizer: ``smiles``, ``selfies``, ``char`` or ``word``.
      max_len: padded length in tokens, ``<eos>`` included.
      kekulize: SMILES are modelled in Kekule form (``data.kekulize``).
      canonical: decoded molecules come out as RDKit's canonical (aromatic) SMILES, the form
        users' files and searches use, whatever form the model writes (Kekule, SELFIES);
        strings that are no molecule stay as decoded.
    """

    vocab: Vocabulary
    tokenizer: str
    max_len: int
    kekulize: bool = False
    canonical: bool = False  # ids_to_texts writes valid molecules as RDKit's canonical SMILES

    @property
    def molecules(self) -> bool:
        """True for SMILES and SELFIES runs, whose texts are molecules."""
        return self.tokenizer in MOLECULE_TOKENIZERS


def is_selfies(text: str) -> bool:
    """Whether a molecule text is already SELFIES: nothing but bracketed symbols and dots (a
    SMILES such as ``[H]N=C1...`` that only starts with a bracket atom is not; one made of
    bracket atoms only, such as ``[Na+].[Cl-]``, is the same molecule read either way)."""
    return bool(text) and SELFIES_PATTERN.fullmatch(text) is not None


def to_model_notation(text: str, tokenizer: str, kekulize: bool = False) -> str:
    """The text as the tokenizer expects it: SMILES become SELFIES for SELFIES runs, and Kekule
    SMILES for ``kekulize`` runs.

    Raises:
      SeqvaeError: a SMILES string that ``selfies`` cannot convert, or that does not kekulize.
    """
    if tokenizer == "selfies" and not is_selfies(text):
        return SelfiesTokenizer.from_smiles(text)
    if kekulize:
        kekule = chemistry.kekule_smiles(text)
        if kekule is None:
            raise SeqvaeError(f"cannot write {text[:60]!r} in Kekule form (RDKit)")
        return kekule
    return text


def _invalid_rows(texts: Sequence[str], tokenizer: str) -> list[int]:
    """``invalid_smiles_rows`` on every core for many texts, with progress."""
    if len(texts) < PARALLEL_MIN:
        return invalid_smiles_rows(texts, tokenizer)
    chunks = parallel.map_chunks(functools.partial(_invalid_flags, tokenizer=tokenizer),
                                 list(texts), _preparing, "checking SMILES", PARALLEL_MIN)
    return [row for row, bad in enumerate(flag for chunk in chunks for flag in chunk) if bad]


def _invalid_flags(texts: Sequence[str], tokenizer: str) -> list[bool]:
    """Whether each text is an invalid SMILES (``invalid_smiles_rows``), for worker processes."""
    bad = set(invalid_smiles_rows(texts, tokenizer))
    return [row in bad for row in range(len(texts))]


def invalid_smiles_rows(texts: Sequence[str], tokenizer: str) -> list[int]:
    """Rows of a molecule run's texts that are SMILES RDKit cannot parse (SELFIES runs accept
    SELFIES strings too; those are not SMILES and not checked here)."""
    rows = [i for i, text in enumerate(texts) if not (tokenizer == "selfies" and is_selfies(text))]
    return [rows[i] for i in chemistry.invalid_smiles([texts[i] for i in rows])]


def ids_to_texts(codec: TextCodec, ids: np.ndarray) -> list[str]:
    """Decoded id rows ``(N, T)`` -> texts, each read up to its ``<eos>``.

    SELFIES runs give SMILES (``""`` where the symbols do not decode), so every molecule run
    speaks SMILES to its users; with ``codec.canonical``, RDKit's canonical SMILES.
    """
    tokenizer = get_tokenizer(codec.tokenizer)
    texts = [tokenizer.detokenize(codec.vocab.decode(row)) for row in np.asarray(ids)]
    if codec.tokenizer == "selfies":
        texts = [_selfies_to_smiles(text) for text in texts]
    if codec.canonical and codec.molecules:
        texts = chemistry.canonical_or_as_is(texts)
    return texts


def _selfies_to_smiles(text: str) -> str:
    try:
        return SelfiesTokenizer.to_smiles(text)
    except SeqvaeError:
        return ""


@dataclass
class EncodedTexts:
    """The texts that could be encoded, in input order.

    Attributes:
      ids: int32 ``(N_kept, max_len)``, ``<eos>`` after each sequence, ``<pad>`` after that.
      lengths: int32 ``(N_kept,)`` tokens per row, ``<eos>`` included.
      kept: int ``(N_kept,)`` the input row of each encoded row.
      texts: the kept input texts, as given (SMILES stay SMILES for SELFIES runs).
      problems: ``(input row, kind, "SOURCE:LINE: problem")`` for each row left out; kind is
        ``invalid`` (not a molecule), ``notation`` (no SELFIES for it), ``unknown_token`` or
        ``too_long``.
    """

    ids: np.ndarray
    lengths: np.ndarray
    kept: np.ndarray
    texts: list[str]
    problems: list[tuple[int, str, str]] = field(default_factory=list)

    @property
    def messages(self) -> list[str]:
        return [message for _, _, message in self.problems]


def encode_texts(codec: TextCodec, texts: Sequence[str], *, on_error: str = "raise",
                 check_molecules: bool = True, source: str = "input",
                 line_numbers: Sequence[int] | None = None,
                 notations: Sequence[str | None] | None = None) -> EncodedTexts:
    """Encodes texts with a run's vocabulary: the one path from text to ids.

    A row is left out (``on_error="skip"``) or reported (``"raise"``) when it is not a valid
    molecule (molecule runs, with ``check_molecules``), cannot be converted to SELFIES, holds a
    token outside the vocabulary, or is longer than ``codec.max_len`` with its ``<eos>``.

    Args:
      codec: vocabulary, tokenizer and length.
      texts: N texts.
      on_error: ``"raise"`` (a ``SeqvaeError`` naming the first bad line), ``"skip"``, or
        ``"skip_invalid"`` (leave out invalid molecules, raise on anything else).
      check_molecules: parse molecules with RDKit first (off for data known to be valid).
      source, line_numbers: how messages name a row (default: 1-based input position).
      notations: each text already in the model's notation (None where it could not be
        converted), as ``prepare_data`` converts SELFIES runs' texts once for fitting and encoding.

    Returns:
      ``EncodedTexts``; ``messages`` lists the rows left out.
    """
    if on_error not in ("raise", "skip", "skip_invalid"):
        raise ValueError(f'on_error must be "raise", "skip" or "skip_invalid", got {on_error!r}')
    lines = list(line_numbers) if line_numbers is not None else list(range(1, len(texts) + 1))
    tokenizer = get_tokenizer(codec.tokenizer)
    invalid = set()
    if codec.molecules and check_molecules:
        if codec.kekulize and codec.tokenizer == "smiles":  # one parse checks and converts
            rows, notations = chemistry.checked_kekule_smiles(texts)
            invalid = set(rows)
        else:
            invalid = set(invalid_smiles_rows(texts, codec.tokenizer))
    encoded, kept, problems = [], [], []
    for row, text in enumerate(texts):
        kind, problem = ("invalid", f"invalid SMILES {text[:60]!r}") if row in invalid else (None, None)
        if kind is None:
            kind, problem, ids = _encode_one(codec, tokenizer, text,
                                             notations[row] if notations else None)
        if kind is not None:
            message = f"{source}:{lines[row]}: {problem}"
            if on_error == "raise" or (on_error == "skip_invalid" and kind != "invalid"):
                raise SeqvaeError(message)
            problems.append((row, kind, message))
            continue
        encoded.append(ids)
        kept.append(row)
    ids = np.full((len(encoded), codec.max_len), PAD_ID, np.int32)
    lengths = np.array([len(row) for row in encoded], np.int32)
    for row, values in enumerate(encoded):
        ids[row, :len(values)] = values
    return EncodedTexts(ids, lengths, np.array(kept, np.int64), [texts[i] for i in kept], problems)


def _encode_one(codec: TextCodec, tokenizer, text: str, notation: str | None = None):
    """``(kind, problem, None)`` or ``(None, None, ids with <eos>)`` for one text, given or
    converting to its model notation (``to_model_notation``)."""
    try:
        tokens = tokenizer.tokenize(notation if notation is not None else
                                    to_model_notation(text, codec.tokenizer, codec.kekulize))
    except SeqvaeError as error:
        return "notation", str(error), None
    unknown = next((token for token in tokens if token not in codec.vocab), None)
    if unknown is not None:
        return "unknown_token", f"token {unknown!r} is not in the run's vocabulary", None
    if len(tokens) + 1 > codec.max_len:
        return "too_long", (f"{len(tokens) + 1} tokens with <eos>, longer than the model's "
                            f"maximum of {codec.max_len}"), None
    return None, None, codec.vocab.encode(tokens)


@dataclass
class PreparedData:
    """A training corpus, encoded once, and its train/validation split."""

    codec: TextCodec
    encoded: EncodedTexts
    train_index: np.ndarray
    val_index: np.ndarray
    source: str
    skipped: int = 0
    line_numbers: list[int] | None = None  # source line of each encoded row

    @property
    def vocab(self) -> Vocabulary:
        return self.codec.vocab

    @property
    def tokenizer(self) -> str:
        return self.codec.tokenizer

    @property
    def max_len(self) -> int:
        return self.codec.max_len

    @property
    def ids(self) -> np.ndarray:
        return self.encoded.ids

    @property
    def lengths(self) -> np.ndarray:
        return self.encoded.lengths

    @property
    def texts(self) -> list[str]:
        return self.encoded.texts


def prepare_data(config: DataConfig, data=None, *, codec: TextCodec | None = None,
                 seed: int = 0, strict: bool = False) -> PreparedData:
    """Reads a training corpus, fits (or reuses) the vocabulary, and encodes it once.

    Invalid SMILES lines are skipped with a note on stderr (``strict``: the first one is an
    error); unknown tokens (with a given ``codec``) and over-long lines are errors that name
    the line.

    Args:
      config: the data section.
      data: a path, ``moses:SPLIT``, a list of strings or a numpy array; None = MOSES train.
      codec: a stored run's vocabulary, tokenizer and length (resume); None fits them.
      seed: seeds the validation split (and the draw of ``data.subset=random``).
      strict: fail on the first invalid SMILES instead of skipping invalid lines.
    """
    source = "moses:train" if data is None else data
    if is_moses(source) or (isinstance(source, str) and os.path.isfile(source)
                            and os.path.getsize(source) > LARGE_FILE):
        _preparing(f"reading {source}")  # the first line of a long preparation
    seqs = sources.read_sequences(source, config.column, config.lines_read)
    if config.subset == "random" and config.limit:
        seqs = sources.random_subset(seqs, config.limit, seed)
    name = codec.tokenizer if codec else "word" if seqs.one_hot_classes else config.tokenizer
    if codec.kekulize if codec else (config.kekule and not seqs.one_hot_classes):
        seqs, invalid = _kekulized(seqs, strict)
    else:
        invalid = []
        if name in MOLECULE_TOKENIZERS and not is_moses(seqs.source):  # MOSES is valid
            invalid = _invalid_rows(seqs.texts, name)
            _report_invalid(seqs, invalid, strict)
        seqs = _without_rows(seqs, invalid)
    notations = None
    if name == "selfies":  # converted once for fitting and encoding (selfies: 0.5 ms a molecule)
        notations = [_notation_or_none(text, name) for text in seqs.texts]
    codec = codec or _fit_codec(config, seqs, notations)
    encoded = encode_texts(codec, seqs.texts, on_error="raise", check_molecules=False,
                           source=seqs.source, line_numbers=seqs.line_numbers,
                           notations=notations)
    train_index, val_index = batching.validation_split(len(encoded.ids), config.validation_fraction,
                                                       seed)
    return PreparedData(codec, encoded, train_index, val_index, seqs.source, len(invalid),
                        [seqs.line_numbers[i] for i in encoded.kept])


def _preparing(line: str) -> None:
    note(f"seqvae: preparing the data: {line}")


def _kekulized(seqs: sources.Sequences, strict: bool) -> tuple[sources.Sequences, list[int]]:
    """The texts in Kekule form, from one RDKit parse each (~0.15 ms a molecule; encode_texts
    then passes Kekule text through unchanged), and the rows dropped. A molecule that does not
    kekulize does not sanitize either, so RDKit calls it invalid, and it is skipped (or refused)
    like any invalid SMILES."""
    report = _preparing if len(seqs.texts) >= PARALLEL_MIN else (lambda line: None)
    chunks = parallel.map_chunks(chemistry.kekule_forms, seqs.texts, report, "Kekule SMILES",
                                 PARALLEL_MIN)
    converted = [text for chunk in chunks for text in chunk]
    bad = [i for i, text in enumerate(converted) if text is None]
    _report_invalid(seqs, bad, strict)
    return _without_rows(sources.Sequences(converted, seqs.line_numbers, seqs.source), bad), bad


def _without_rows(seqs: sources.Sequences, rows: list[int]) -> sources.Sequences:
    """``seqs`` without the given rows (their line numbers kept for the others)."""
    if not rows:
        return seqs
    drop = set(rows)
    keep = [i for i in range(len(seqs.texts)) if i not in drop]
    return sources.Sequences([seqs.texts[i] for i in keep], [seqs.line_numbers[i] for i in keep],
                             seqs.source)


def _notation_or_none(text: str, tokenizer: str) -> str | None:
    """``to_model_notation`` of a text, or None where it cannot be converted (encoding then
    names the line and the problem)."""
    try:
        return to_model_notation(text, tokenizer)
    except SeqvaeError:
        return None


def _fit_codec(config: DataConfig, seqs: sources.Sequences,
               notations: Sequence[str | None] | None = None) -> TextCodec:
    """Vocabulary and length fitted to the data (one-hot arrays: their classes); ``notations``
    as in ``encode_texts``."""
    if seqs.one_hot_classes:
        vocab = Vocabulary([str(c) for c in range(seqs.one_hot_classes)])
        longest = max(len(text.split()) for text in seqs.texts)
        return TextCodec(vocab, "word", config.max_len or longest + 1)
    name = config.tokenizer
    tokenizer = get_tokenizer(name)
    if is_moses(seqs.source) and config.limit and not (config.kekule
                                                                   or name == "selfies"):
        # A subset of MOSES still gets the vocabulary and length of the whole train split, so
        # the run can encode and evaluate on the MOSES test splits. Not for Kekule or SELFIES
        # runs: each of the 1.58M molecules would be converted first (RDKit 0.15 ms, selfies
        # 0.5 ms a molecule: 4 and 13 minutes); their test molecules with a token the subset
        # lacks, or longer, are left out of the VAE measures with a note.
        seqs, notations = sources.read_sequences("moses:train"), None
    token_lists = []
    for row, text in enumerate(seqs.texts):
        notation = notations[row] if notations is not None else None
        try:
            token_lists.append(tokenizer.tokenize(
                notation if notation is not None else to_model_notation(text, name, config.kekule)))
        except SeqvaeError:
            continue  # not convertible: reported when the row is encoded
    if not token_lists:
        raise SeqvaeError(f"{seqs.source}: no line can be tokenized with the {name} tokenizer")
    longest = max(len(tokens) for tokens in token_lists)
    return TextCodec(Vocabulary.fit(token_lists), name, config.max_len or longest + 1,
                     kekulize=config.kekule)


def _report_invalid(seqs: sources.Sequences, bad: list[int], strict: bool) -> None:
    """Invalid SMILES lines: an error (strict, or every line), else one note on stderr."""
    if not bad:
        return
    lines = ", ".join(str(seqs.line_numbers[i]) for i in bad[:5])
    if strict:
        raise SeqvaeError(f"{seqs.source}:{seqs.line_numbers[bad[0]]}: invalid SMILES "
                          f"{seqs.texts[bad[0]][:60]!r} ({len(bad)} invalid lines in all: {lines})")
    if len(bad) == len(seqs.texts):
        raise SeqvaeError(f"{seqs.source}: none of the {len(bad)} lines is a valid SMILES "
                          f"(line {seqs.line_numbers[0]}: {seqs.texts[0][:40]!r}); "
                          f"{tokenizer_hint(seqs.texts)}")
    note(f"seqvae: skipped {len(bad)} invalid SMILES in {seqs.source} (lines {lines}"
          f"{', ...' if len(bad) > 5 else ''}); use --strict to fail instead")


def tokenizer_hint(texts: Sequence[str]) -> str:
    """What to do with lines that are not SMILES: the tokenizers that fit them, by their look
    (SELFIES symbols, words separated by spaces, or any other text read character by character)."""
    some = [text for text in texts[:1000] if text]
    if some and all(is_selfies(text) for text in some):
        return "they are SELFIES: train with data.tokenizer=selfies"
    if some and sum(" " in text for text in some) > len(some) / 2:
        return ("for tokens separated by spaces train with data.tokenizer=word "
                "(or data.tokenizer=char: one token per character)")
    return ("for text that is not SMILES (proteins, words) train with data.tokenizer=char "
            "(one token per character) or data.tokenizer=word (tokens separated by spaces)")
