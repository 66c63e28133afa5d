"""Tokenizers that split text into tokens and join them back (``seqvae.data.vocabulary`` maps
tokens to ids).

Every tokenizer round-trips exactly: ``detokenize(tokenize(text)) == text`` for all text it
accepts (for ``WordTokenizer``, text whose words are separated by single spaces).
"""

from __future__ import annotations

import re
from typing import Protocol, Sequence, runtime_checkable

from seqvae.errors import SeqvaeError

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
SELFIES_PATTERN = re.compile(r"(?:\[[^\[\]]*\]|\.)*")  # a whole SELFIES string
_SELFIES_SYMBOL = re.compile(r"\[[^\[\]]*\]|\.")


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
        if not SELFIES_PATTERN.fullmatch(text):
            raise SeqvaeError(
                f"not a SELFIES string: {_shorten(text)!r}; convert SMILES with "
                "SelfiesTokenizer.from_smiles first"
            )
        # Not selfies.split_selfies: it drops a lone "." and glues ".." into ".[O]" symbols.
        return _SELFIES_SYMBOL.findall(text)

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


def _shorten(text: str, limit: int = 80) -> str:
    """Cuts long user text so that error messages stay one readable line."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
