"""Tokenizers that split text into tokens, and the vocabulary that maps tokens to ids.

Every tokenizer round-trips exactly: ``detokenize(tokenize(text)) == text`` for all text it
accepts (for ``WordTokenizer``, text whose words are separated by single spaces). The vocabulary
always reserves ids 0..3 for ``<pad>``, ``<bos>``, ``<eos>`` and ``<unk>``, and orders the rest
by descending count, ties by token string, so ids never depend on the order of the data.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

import numpy as np

from seqvae.errors import SeqvaeError

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)

# Atom-level SMILES regex of Schwaller et al. (Molecular Transformer, 2019): bracket atoms,
# two-letter halogens and %NN ring closures are single tokens. The final `.` (with DOTALL) makes
# any character the chemistry alternatives miss a token of its own, so the tokens always tile
# the input and detokenize(tokenize(s)) == s even for text that is not SMILES.
SMILES_PATTERN = (
    r"\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>|\*|\$"
    r"|%[0-9]{2}|[0-9]"
)
_SMILES_REGEX = re.compile(SMILES_PATTERN + "|.", re.DOTALL)
# A SELFIES string is a run of bracketed symbols and "." separators; selfies.split_selfies
# silently drops or merges anything else, so we check first to keep the round trip exact.
_SELFIES_REGEX = re.compile(r"(?:\[[^\[\]]*\]|\.)*")


@runtime_checkable
class Tokenizer(Protocol):
    """Splits text into string tokens and joins them back.

    Attributes:
        name: The name that ``get_tokenizer`` accepts and that run directories record.
    """

    name: str

    def tokenize(self, text: str) -> list[str]:
        """Splits ``text`` into tokens."""
        ...

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Joins ``tokens`` back into text; the inverse of ``tokenize``."""
        ...


class SmilesTokenizer:
    """Atom-level SMILES tokens; ``Cl``, ``Br``, ``[nH]``, ``[C@@H]``, ``%10`` are one each."""

    name = "smiles"

    def tokenize(self, text: str) -> list[str]:
        """Splits a SMILES string into atom-level tokens.

        Args:
            text: A SMILES string. Characters outside the SMILES alphabet become one token each.

        Returns:
            The tokens, whose concatenation is ``text``.
        """
        return _SMILES_REGEX.findall(text)

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Concatenates tokens into a SMILES string."""
        return "".join(tokens)


class SelfiesTokenizer:
    """SELFIES symbols such as ``[C]``, ``[=O]``, ``[Ring1]`` as tokens; text is a SELFIES string.

    Use ``from_smiles`` to convert data before tokenizing and ``to_smiles`` after detokenizing.
    """

    name = "selfies"

    def tokenize(self, text: str) -> list[str]:
        """Splits a SELFIES string into its symbols.

        Args:
            text: A SELFIES string, e.g. ``"[C][=O]"``.

        Returns:
            The symbols, whose concatenation is ``text``.

        Raises:
            SeqvaeError: If ``text`` is not a sequence of ``[...]`` symbols and ``.``.
        """
        import selfies

        if not _SELFIES_REGEX.fullmatch(text):
            raise SeqvaeError(
                f"not a SELFIES string: {_shorten(text)!r}; convert SMILES with "
                "SelfiesTokenizer.from_smiles first"
            )
        return list(selfies.split_selfies(text))

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Concatenates symbols into a SELFIES string."""
        return "".join(tokens)

    @staticmethod
    def from_smiles(smiles: str) -> str:
        """Converts a SMILES string to SELFIES.

        Raises:
            SeqvaeError: If the ``selfies`` package cannot parse ``smiles``.
        """
        import selfies

        try:
            return selfies.encoder(smiles, strict=True)
        except selfies.EncoderError as error:
            raise SeqvaeError(
                f"cannot convert SMILES {_shorten(smiles)!r} to SELFIES: {_first_line(error)}"
            ) from None

    @staticmethod
    def to_smiles(selfies_string: str) -> str:
        """Converts a SELFIES string to SMILES.

        Raises:
            SeqvaeError: If ``selfies_string`` contains a symbol the decoder does not know.
        """
        import selfies

        try:
            return selfies.decoder(selfies_string)
        except selfies.DecoderError as error:
            raise SeqvaeError(
                f"cannot convert SELFIES {_shorten(selfies_string)!r} to SMILES: "
                f"{_first_line(error)}"
            ) from None


class CharTokenizer:
    """One token per Unicode code point; works for any text, e.g. protein sequences."""

    name = "char"

    def tokenize(self, text: str) -> list[str]:
        """Splits ``text`` into its characters."""
        return list(text)

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Concatenates characters."""
        return "".join(tokens)


class WordTokenizer:
    """Whitespace-separated words; detokenizing joins them with single spaces."""

    name = "word"

    def tokenize(self, text: str) -> list[str]:
        """Splits ``text`` on runs of whitespace, ignoring leading and trailing whitespace."""
        return text.split()

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Joins words with single spaces."""
        return " ".join(tokens)


_TOKENIZERS = {
    cls.name: cls for cls in (SmilesTokenizer, SelfiesTokenizer, CharTokenizer, WordTokenizer)
}


def get_tokenizer(name: str) -> Tokenizer:
    """Returns a new tokenizer by name.

    Args:
        name: One of ``"char"``, ``"selfies"``, ``"smiles"``, ``"word"``.

    Raises:
        SeqvaeError: If ``name`` is not one of these.
    """
    try:
        return _TOKENIZERS[name]()
    except (KeyError, TypeError):
        raise SeqvaeError(
            f"unknown tokenizer {name!r}; choose one of: {', '.join(sorted(_TOKENIZERS))}"
        ) from None


class UnknownTokenError(SeqvaeError, KeyError):
    """A token that is not in the vocabulary, raised by ``encode(..., unknown="error")``.

    It is a ``KeyError`` for code that looks tokens up, and a ``SeqvaeError`` so that the
    command line reports it in one line.

    Attributes:
        token: The token that was not found.
    """

    def __init__(self, token: str):
        super().__init__(token)
        self.token = token

    def __str__(self) -> str:
        return f"token {self.token!r} is not in the vocabulary"


class Vocabulary:
    """A bijection between tokens and integer ids, with the special tokens at ids 0..3.

    Attributes:
        pad_id: Id of ``<pad>`` (0), which fills sequences up to a common length.
        bos_id: Id of ``<bos>`` (1), the decoder's start token.
        eos_id: Id of ``<eos>`` (2), which ends every encoded sequence.
        unk_id: Id of ``<unk>`` (3), which stands for tokens outside the vocabulary.
    """

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, tokens: Sequence[str]):
        """Creates a vocabulary.

        Args:
            tokens: The non-special tokens in id order; the first gets id 4.

        Raises:
            SeqvaeError: If a token is not a string, is repeated, or is a special token.
        """
        self._tokens = list(SPECIAL_TOKENS)
        self._ids: dict[str, int] = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
        for token in tokens:
            if not isinstance(token, str):
                raise SeqvaeError(f"vocabulary tokens must be strings, got {token!r}")
            if token in self._ids:
                kind = "a special token" if token in SPECIAL_TOKENS else "repeated"
                raise SeqvaeError(f"vocabulary token {token!r} is {kind}")
            self._ids[token] = len(self._tokens)
            self._tokens.append(token)

    @classmethod
    def fit(cls, token_lists: Iterable[Sequence[str]], min_count: int = 1) -> "Vocabulary":
        """Builds a vocabulary from tokenized data.

        Tokens are ordered by descending count, ties by token string, so the ids do not depend
        on the order of the data. Tokens equal to a special token are not added: they already
        have ids 0..3.

        Args:
            token_lists: One token sequence per example.
            min_count: Tokens seen fewer times than this are left out and encode as ``<unk>``.

        Returns:
            The vocabulary.
        """
        if min_count < 1:
            raise SeqvaeError(f"min_count must be at least 1, got {min_count}")
        counts: Counter[str] = Counter()
        for tokens in token_lists:
            counts.update(tokens)
        kept = [(-n, token) for token, n in counts.items() if n >= min_count]
        kept.sort()
        return cls([token for _, token in kept if token not in SPECIAL_TOKENS])

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._ids

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return self._tokens == other._tokens

    def __repr__(self) -> str:
        return f"Vocabulary(size={len(self)})"

    @property
    def tokens(self) -> list[str]:
        """All tokens in id order, the special tokens first (a copy)."""
        return list(self._tokens)

    def encode(
        self, tokens: Iterable[str], *, add_eos: bool = True, unknown: str = "unk"
    ) -> list[int]:
        """Maps tokens to ids.

        Args:
            tokens: The tokens of one sequence.
            add_eos: Whether to append ``<eos>``.
            unknown: ``"unk"`` maps tokens outside the vocabulary to ``<unk>``; ``"error"``
                raises ``UnknownTokenError`` instead.

        Returns:
            The ids, ending with ``eos_id`` when ``add_eos``.

        Raises:
            UnknownTokenError: For the first unknown token when ``unknown="error"``.
        """
        ids = self._ids
        if unknown == "unk":
            unk_id = self.unk_id
            result = [ids.get(token, unk_id) for token in tokens]
        elif unknown == "error":
            try:
                result = [ids[token] for token in tokens]
            except KeyError as error:
                raise UnknownTokenError(error.args[0]) from None
        else:
            raise ValueError(f'unknown must be "unk" or "error", got {unknown!r}')
        if add_eos:
            result.append(self.eos_id)
        return result

    def decode(self, ids: Iterable[int] | np.ndarray) -> list[str]:
        """Maps ids back to tokens, stopping at the first ``<eos>``.

        Args:
            ids: One sequence of ids, shape ``(T,)``; a list or a numpy array.

        Returns:
            The tokens before the first ``<eos>``, without ``<pad>`` and ``<bos>``. ``<unk>``
            is kept.

        Raises:
            ValueError: If an id is outside ``[0, len(self))``.
        """
        if isinstance(ids, np.ndarray):
            if ids.ndim != 1:
                raise ValueError(f"decode takes one sequence of shape (T,), got shape {ids.shape}")
            ids = ids.tolist()
        size = len(self._tokens)
        result = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if not 0 <= i < size:
                raise ValueError(f"id {i} is outside the vocabulary of size {size}")
            if i != self.pad_id and i != self.bos_id:
                result.append(self._tokens[i])
        return result

    def to_dict(self) -> dict[str, Any]:
        """Returns a JSON-ready description that ``from_dict`` turns back into this vocabulary."""
        return {
            "special_tokens": list(SPECIAL_TOKENS),
            "tokens": self._tokens[len(SPECIAL_TOKENS) :],
        }

    @classmethod
    def from_dict(cls, data: Any) -> "Vocabulary":
        """Rebuilds a vocabulary from ``to_dict`` output.

        Raises:
            SeqvaeError: If ``data`` is not such a description.
        """
        if not isinstance(data, dict) or not isinstance(data.get("tokens"), list):
            raise SeqvaeError('a vocabulary must be a JSON object with a "tokens" list')
        specials = data.get("special_tokens", list(SPECIAL_TOKENS))
        if specials != list(SPECIAL_TOKENS):
            raise SeqvaeError(
                f"vocabulary special tokens are {specials!r}, expected {list(SPECIAL_TOKENS)!r}"
            )
        return cls(data["tokens"])

    def save(self, path: str | os.PathLike) -> None:
        """Writes the vocabulary as JSON, atomically: readers see the old file or the new one.

        Args:
            path: The file to write; its folder is created if needed.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self.to_dict(), f, ensure_ascii=False, indent=1)
                f.write("\n")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Vocabulary":
        """Reads a vocabulary written by ``save``.

        Raises:
            SeqvaeError: If the file is missing, unreadable, not JSON or not a vocabulary.
        """
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise SeqvaeError(f"{path}: vocabulary file not found") from None
        except json.JSONDecodeError as error:
            raise SeqvaeError(
                f"{path}, line {error.lineno}: not valid JSON ({error.msg}); "
                "the vocabulary file is damaged, rebuild it"
            ) from None
        except (OSError, UnicodeDecodeError) as error:
            raise SeqvaeError(f"{path}: cannot read vocabulary file ({error})") from None
        try:
            return cls.from_dict(data)
        except SeqvaeError as error:
            raise SeqvaeError(f"{path}: {error}") from None


def encode_batch(
    vocab: Vocabulary,
    tokenizer: Tokenizer,
    texts: Iterable[str],
    max_len: int,
    *,
    unknown: str = "unk",
) -> tuple[np.ndarray, np.ndarray]:
    """Tokenizes, encodes with ``<eos>`` and pads a batch of texts.

    Args:
        vocab: The vocabulary.
        tokenizer: The tokenizer the vocabulary was fit with.
        texts: N texts.
        max_len: Length of the padded sequences, counting ``<eos>``.
        unknown: How to treat tokens outside the vocabulary, as in ``Vocabulary.encode``.

    Returns:
        ``(ids, lengths)``: ids of shape ``(N, max_len)``, int32, padded with ``pad_id``;
        lengths of shape ``(N,)``, int32, the number of ids before padding (``<eos>`` included).

    Raises:
        SeqvaeError: If a sequence with its ``<eos>`` is longer than ``max_len``; the message
            names the 1-based index of the first such text and its length.
    """
    if max_len < 1:
        raise SeqvaeError(f"max_len must be at least 1, got {max_len}")
    encoded = []
    for index, text in enumerate(texts, start=1):
        ids = vocab.encode(tokenizer.tokenize(text), unknown=unknown)
        if len(ids) > max_len:
            raise SeqvaeError(
                f"line {index}: {len(ids)} tokens with <eos>, more than max_len={max_len}; "
                "raise max_len or drop the long lines"
            )
        encoded.append(ids)
    batch = np.full((len(encoded), max_len), vocab.pad_id, dtype=np.int32)
    lengths = np.fromiter((len(ids) for ids in encoded), dtype=np.int32, count=len(encoded))
    for row, ids in zip(batch, encoded):
        row[: len(ids)] = ids
    return batch, lengths


def decode_batch(
    vocab: Vocabulary, tokenizer: Tokenizer, ids: np.ndarray | Sequence[Sequence[int]]
) -> list[str]:
    """Turns a batch of id sequences back into texts.

    Args:
        vocab: The vocabulary.
        tokenizer: The tokenizer the vocabulary was fit with.
        ids: Shape ``(N, T)``; each row is read up to its first ``<eos>``.

    Returns:
        N texts (SELFIES strings for the SELFIES tokenizer).
    """
    return [tokenizer.detokenize(vocab.decode(row)) for row in ids]


def _shorten(text: str, limit: int = 80) -> str:
    """Cuts long user text so that error messages stay one readable line."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
