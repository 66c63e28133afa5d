"""A user's molecules made writable by a trained run: salts and solvents stripped to the largest
fragment, stereo written without it where the run's vocabulary has none, and what the run still
cannot write counted by kind, or the vocabulary grown to write it (``grown_codec``).

This is what ``seqvae finetune`` does to NEW_DATA before it trains a run on it: a file of
approved drugs holds salts (``Br.CC(N)Cc1ccc(O)cc1``), stereo, charges and metals that a model
trained on MOSES has never written.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from seqvae.data import sources
from seqvae.data.preparation import TextCodec, encode_texts, to_model_notation
from seqvae.data.tokenizers import get_tokenizer
from seqvae.data.vocabulary import SPECIAL_TOKENS, Vocabulary
from seqvae.errors import SeqvaeError

# How ``describe`` names the kinds of rows ``adapt`` leaves out (``EncodedTexts.problems``).
LEFT_OUT_KINDS = {"invalid": "not a valid molecule", "notation": "not convertible to the run's "
                  "notation", "unknown_token": "with a token the run cannot write",
                  "too_long": "longer than the run's max_len"}
STEREO_MARKS = ("@", "/", "\\")


@dataclass
class AdaptedMolecules:
    """The molecules of a file as a run can write them.

    Attributes:
      texts: the kept molecules, canonical SMILES after stripping (for a run on text: as read).
      line_numbers: the source line of each kept molecule.
      source: the file (or ``moses:SPLIT``) they were read from.
      read: molecules read.
      stripped: molecules of several fragments cut to their largest.
      without_stereo: molecules whose stereo was dropped (the vocabulary writes none).
      left_out: kind (``LEFT_OUT_KINDS``) -> ``[(line, text as read, problem)]``.
      missing_tokens: token -> molecules that need it and the vocabulary lacks.
    """

    texts: list[str]
    line_numbers: list[int]
    source: str
    read: int
    stripped: int = 0
    without_stereo: int = 0
    left_out: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)
    missing_tokens: Counter = field(default_factory=Counter)

    @property
    def left_out_count(self) -> int:
        return sum(len(rows) for rows in self.left_out.values())


def writes_stereo(vocab: Vocabulary) -> bool:
    """Whether a SMILES vocabulary has a token that writes stereo (``[C@@H]``, ``/``, ``\\``)."""
    return any(mark in token for token in vocab.tokens for mark in STEREO_MARKS)


def standardize(smiles: str, drop_stereo: bool) -> tuple[str | None, bool, bool]:
    """``(canonical SMILES or None if invalid, stripped, stereo dropped)`` of one molecule: its
    largest fragment (RDKit's ``LargestFragmentChooser``, organic fragments first: a salt's
    counter-ion or a solvent goes), without stereo if ``drop_stereo``."""
    from rdkit import Chem
    from rdkit.Chem.MolStandardize import rdMolStandardize

    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        return None, False, False
    stripped = len(Chem.GetMolFrags(mol)) > 1
    if stripped:
        mol = rdMolStandardize.LargestFragmentChooser(preferOrganic=True).choose(mol)
    text = Chem.MolToSmiles(mol)
    dropped = False
    if drop_stereo and any(mark in text for mark in STEREO_MARKS):
        Chem.RemoveStereochemistry(mol)
        text, dropped = Chem.MolToSmiles(mol), True
    return text, stripped, dropped


def adapt(seqs: sources.Sequences, codec: TextCodec, *, strip: bool = True,
          drop_stereo: bool | None = None) -> AdaptedMolecules:
    """The molecules of ``seqs`` as ``codec`` can write them, and what it cannot, by kind:
    ``encode(clean(...), codec)``.

    Args:
      seqs: what was read (``sources.read_sequences``).
      codec: the run's (or a grown one, ``grown_codec``).
      strip: molecule runs: keep each molecule's largest fragment.
      drop_stereo: molecule runs: write molecules without stereo; None: where the vocabulary
        writes none (``writes_stereo``).

    Returns:
      ``AdaptedMolecules``; rows the codec cannot encode are in ``left_out``.
    """
    if drop_stereo is None:
        drop_stereo = codec.molecules and not writes_stereo(codec.vocab)
    return encode(clean(seqs, codec.molecules, strip=strip, drop_stereo=drop_stereo), codec)


def clean(seqs: sources.Sequences, molecules: bool, *, strip: bool = True,
          drop_stereo: bool = False) -> AdaptedMolecules:
    """The molecules of ``seqs`` standardized (``standardize``; a text run's texts as read):
    invalid SMILES in ``left_out["invalid"]``, the rest in ``texts`` for ``encode`` or
    ``grown_codec``. Without ``strip``, a molecule of several fragments is kept as read."""
    cleaned = AdaptedMolecules(list(seqs.texts), list(seqs.line_numbers), seqs.source,
                               len(seqs.texts))
    if not molecules:
        return cleaned
    cleaned.texts, cleaned.line_numbers = [], []
    invalid = []
    for line, text in zip(seqs.line_numbers, seqs.texts):
        if not strip and "." in text:
            clean_text = text
        else:
            clean_text, stripped, dropped = standardize(text, drop_stereo)
            if clean_text is None:
                invalid.append((line, text, f"invalid SMILES {text[:60]!r}"))
                continue
            cleaned.stripped += stripped
            cleaned.without_stereo += dropped
        cleaned.texts.append(clean_text)
        cleaned.line_numbers.append(line)
    if invalid:
        cleaned.left_out["invalid"] = invalid
    return cleaned


def encode(cleaned: AdaptedMolecules, codec: TextCodec) -> AdaptedMolecules:
    """``cleaned`` (``clean``) with what ``codec`` cannot encode moved to ``left_out`` by kind,
    and the tokens it lacks counted in ``missing_tokens``."""
    texts, lines = cleaned.texts, cleaned.line_numbers
    encoded = encode_texts(codec, texts, on_error="skip", source=cleaned.source,
                           line_numbers=lines)
    adapted = AdaptedMolecules(encoded.texts, [lines[row] for row in encoded.kept],
                               cleaned.source, cleaned.read, cleaned.stripped,
                               cleaned.without_stereo, dict(cleaned.left_out))
    tokenizer = get_tokenizer(codec.tokenizer)
    for row, kind, message in encoded.problems:
        adapted.left_out.setdefault(kind, []).append((lines[row], texts[row], message))
        if kind == "unknown_token":
            tokens = tokenizer.tokenize(to_model_notation(texts[row], codec.tokenizer,
                                                          codec.kekulize))
            adapted.missing_tokens.update({t for t in tokens if t not in codec.vocab})
    return adapted


def grown_codec(codec: TextCodec, texts: Sequence[str], max_len: int = 0) -> TextCodec:
    """``codec`` with the tokens ``texts`` need appended to its vocabulary (ids of the old
    tokens unchanged; the new ones by descending count, ties by string) and its length raised
    to their longest (``max_len`` > 0: to at most that).

    Raises:
      SeqvaeError: no text can be tokenized.
    """
    tokenizer = get_tokenizer(codec.tokenizer)
    counts: Counter = Counter()
    longest = 0
    for text in texts:
        try:
            tokens = tokenizer.tokenize(to_model_notation(text, codec.tokenizer, codec.kekulize))
        except SeqvaeError:
            continue  # reported when the row is encoded
        counts.update(t for t in tokens if t not in codec.vocab)
        longest = max(longest, len(tokens) + 1)
    new = sorted(counts, key=lambda token: (-counts[token], token))
    length = max(codec.max_len, min(longest, max_len) if max_len else longest)
    vocab = Vocabulary(codec.vocab.tokens[len(SPECIAL_TOKENS):] + new)
    return TextCodec(vocab, codec.tokenizer, length, kekulize=codec.kekulize,
                     canonical=codec.canonical)


def describe(adapted: AdaptedMolecules) -> str:
    """One line: what was read, stripped, written without stereo and left out (each kind with
    its count and first line, the missing tokens by how many molecules need them)."""
    parts = [f"{adapted.source}: {adapted.read:,} molecules read, {len(adapted.texts):,} kept"]
    if adapted.stripped:
        parts.append(f"{adapted.stripped:,} cut to their largest fragment (salts, solvents)")
    if adapted.without_stereo:
        parts.append(f"{adapted.without_stereo:,} written without stereo (the run writes none)")
    for kind, rows in adapted.left_out.items():
        line, _, problem = rows[0]
        problem = problem.split(": ", 1)[-1]
        parts.append(f"left out {len(rows):,} {LEFT_OUT_KINDS.get(kind, kind)} (first: line "
                     f"{line}, {problem})")
    if adapted.missing_tokens:
        common = ", ".join(f"{token} {count}" for token, count in
                           adapted.missing_tokens.most_common(8))
        parts.append(f"missing tokens (molecules): {common}"
                     + (", ..." if len(adapted.missing_tokens) > 8 else "")
                     + "; --extend-vocab adds them")
    return "; ".join(parts)
