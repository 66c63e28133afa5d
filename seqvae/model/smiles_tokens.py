"""SMILES tokens as the grammar sees them: each token's class (atom, bond, branch, ring label,
...), the valence an atom token can hold, and the size of the decoder's view of the grammar's
state (``FEATURE_DIM``)."""

from __future__ import annotations

import re

# Token classes (the previous-token state uses START..END).
START, ATOM, BOND, OPEN, CLOSE, RING, DOT, END, OTHER, SPECIAL = range(10)
NUM_CLASSES = SPECIAL + 1

BOND_ORDERS = {"-": 1, "=": 2, "#": 3, "$": 4, ":": 1, "/": 1, "\\": 1}
# Largest valence of each element (bond-order units) that RDKit accepts (P: 3 or 5, S: 2, 4 or 6).
_MAX_VALENCE = {
    "H": 1, "He": 0, "Li": 1, "Be": 2, "B": 3, "C": 4, "N": 3, "O": 2, "F": 1, "Na": 1, "Mg": 2,
    "Al": 3, "Si": 4, "P": 5, "S": 6, "Cl": 1, "K": 1, "Ca": 2, "Ge": 4, "As": 5, "Se": 6,
    "Br": 1, "Sn": 4, "Sb": 5, "Te": 6, "I": 5, "Xe": 8, "*": 8,
}
# Aromatic atoms: implicit aromatic bonds count 1 unit each (c: 3 ring bonds, or 2 and a =O).
_AROMATIC_VALENCE = {"b": 3, "c": 4, "n": 3, "o": 2, "p": 4, "s": 4, "se": 4, "te": 4, "as": 4}
_ORDER = ("H He Li Be B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Sc Ti V Cr Mn Fe Co Ni Cu Zn Ga Ge "
          "As Se Br Kr Rb Sr Y Zr Nb Mo Tc Ru Rh Pd Ag Cd In Sn Sb Te I Xe").split()
_NOBLE = {"He", "Ne", "Ar", "Kr", "Xe"}
_ORGANIC = {"B", "C", "N", "O", "P", "S", "F", "Cl", "Br", "I", "*", "b", "c", "n", "o", "p", "s"}
_BRACKET = re.compile(r"\[(\d*)(\*|[A-Z][a-z]?|[a-z][a-z]?)(@[A-Z]{2}\d+|@*)(H\d*)?([+-]+\d*)?"
                      r"(:\d+)?\]")
RING_LABEL = re.compile(r"%\d\d|\d")
_UNKNOWN_VALENCE = 8


def atom_valence(token: str) -> int | None:
    """Bond-order units an atom token can hold (its hydrogens subtracted), or None if not an atom.

    >>> atom_valence("C"), atom_valence("[nH]"), atom_valence("[N+]"), atom_valence("[O-]")
    (4, 2, 4, 1)
    """
    if token in _ORGANIC:
        return _AROMATIC_VALENCE.get(token, _MAX_VALENCE.get(token, _UNKNOWN_VALENCE))
    match = _BRACKET.fullmatch(token)
    if not match:
        return None
    _, symbol, _, hydrogens, charge, _ = match.groups()
    h_count = 0 if not hydrogens else int(hydrogens[1:] or 1)
    charge_size = 0
    if charge:
        digits = charge.lstrip("+-")
        charge_size = int(digits) if digits else len(charge)
    signed = charge_size if charge and charge[0] == "+" else -charge_size
    base = _charged_valence(symbol, signed)
    if base is None:  # not a main-group element of the tables: the charge counted up (generous)
        base = _AROMATIC_VALENCE.get(symbol) if symbol.islower() else _MAX_VALENCE.get(symbol)
        base = _UNKNOWN_VALENCE if base is None else base + charge_size
    return max(base - h_count, 0)


def _charged_valence(symbol: str, charge: int) -> int | None:
    """The valence of a main-group atom of this charge: that of the element with as many
    electrons (RDKit's rule: N+ as C, 4; O- as F, 1; S+ as P; B- as C; Na+ as Ne, 0); None for an
    element outside the tables."""
    aromatic = symbol.islower()
    element = symbol.capitalize()
    if element not in _ORDER or (element not in _MAX_VALENCE and element not in _NOBLE):
        return None
    number = _ORDER.index(element) + 1 - charge
    if number < 1:
        return 0
    if number > len(_ORDER):
        return None
    like = _ORDER[number - 1]
    if like in _NOBLE:
        return 0
    if aromatic:
        return _AROMATIC_VALENCE.get(like.lower(), _MAX_VALENCE.get(like))
    return _MAX_VALENCE.get(like)


def token_class(token: str) -> int:
    """The grammar class of one vocabulary token."""
    if token in ("<pad>", "<bos>", "<unk>"):
        return SPECIAL
    if token == "<eos>":
        return END
    if atom_valence(token) is not None:
        return ATOM
    if token in BOND_ORDERS:
        return BOND
    if token == "(":
        return OPEN
    if token == ")":
        return CLOSE
    if RING_LABEL.fullmatch(token):
        return RING
    if token == ".":
        return DOT
    return OTHER


# The decoder's view of the state (``SmilesGrammar.features``): the previous token's class
# (one-hot, START..SPECIAL), then six scaled counts.
FEATURE_DIM = NUM_CLASSES + 6
