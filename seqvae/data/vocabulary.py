"""The vocabulary: a bijection between tokens and integer ids, special tokens first.

Ids 0..3 are always ``<pad>``, ``<bos>``, ``<eos>`` and ``<unk>`` (``PAD_ID`` ... ``UNK_ID``:
every module that needs one of them uses these names); the other tokens are ordered by
descending count, ties by token string, so ids never depend on the order of the data.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any, Iterable, Sequence

import numpy as np

from seqvae.errors import SeqvaeError
from seqvae.files import write_text_atomic

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(len(SPECIAL_TOKENS))


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

    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

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
        write_text_atomic(os.fspath(path), json.dumps(self.to_dict(), ensure_ascii=False, indent=1) + "\n")

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


