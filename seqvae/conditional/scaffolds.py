"""Scaffolds (``--scaffold SMILES_OR_SMARTS``): the substructure every molecule must hold, and the
prefixes that make the decoder write it first and decorate it.

A SMILES run's decoder writes a molecule token by token, so forcing it to begin with the
scaffold's own SMILES (``decoding.forced_prefix_step_fn``) leaves it to decorate what it was
made to write: whatever it appends bonds to the prefix's last atom. ``Decorations`` writes the
scaffold as random SMILES (RDKit, from atom orders drawn with the seed), each ending at an atom
that carries a hydrogen (an attachment point), evenly over those atoms, in the run's notation
(Kekule SMILES for a ``data.kekulize`` run); once decorated molecules are found, some prefixes
are those molecules written to end at another of the scaffold's attachment points, so a second
substituent grows there. The decoder completes every prefix under the grammar mask, so each
completion is a molecule (for Kekule SMILES; an aromatic run's completion can fail RDKit's
aromaticity); RDKit then checks it (``Checker``): it holds the scaffold whenever the decoration
did not change the scaffold's aromaticity.

A SMARTS pattern that reads as a molecule (``Chem.MolFromSmarts`` then ``MolToSmiles``, and the
molecule matches the pattern) is written the same way; one that does not (``[#6;R2]``, say)
gives no prefix, and the search draws z near molecules that hold it instead
(``seqvae.conditional.search``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from seqvae.data.preparation import encode_texts
from seqvae.data.vocabulary import EOS_ID
from seqvae.errors import SeqvaeError
from seqvae.run import Run

MAX_PREFIXES = 64  # distinct rooted SMILES of the scaffold kept
MAX_SCAFFOLD_TEXT = 300  # characters


@dataclass
class Scaffold:
    """A substructure query.

    Attributes:
      text: as the user wrote it.
      query: the RDKit query molecule (``HasSubstructMatch``).
      molecule: the scaffold as a molecule to write as prefixes; None for a SMARTS pattern that
        is not one.
      smarts: whether ``text`` was read as SMARTS (it is not a SMILES).
    """

    text: str
    query: Any
    molecule: Any
    smarts: bool

    def contained_in(self, mol) -> bool:
        """Whether the RDKit molecule ``mol`` holds the scaffold."""
        return mol.HasSubstructMatch(self.query)


# What only SMARTS writes: an atom by number or with a logical operator in brackets, any bond,
# any atom, a recursive pattern. RDKit's SMILES parser reads some of it (``[#6]``) with other
# meanings, so such a text is always a SMARTS.
_SMARTS_ONLY = re.compile(r"\[[^\]]*[#;&,!$]|[~*]")


def parse_scaffold(text: str) -> Scaffold:
    """The scaffold of ``--scaffold``: a SMILES if RDKit reads it as one and it holds nothing
    only SMARTS writes (``[#6]``, ``;``, ``&``, ``,``, ``!``, ``~``, ``*``, ``$(...)``), else
    a SMARTS.

    Raises:
      SeqvaeError: empty, too long, or neither a SMILES nor a SMARTS.
    """
    from rdkit import Chem, rdBase

    text = (text or "").strip()
    if not text:
        raise SeqvaeError("--scaffold: empty; give a SMILES (c1ccc2ncccc2c1) or a SMARTS")
    if len(text) > MAX_SCAFFOLD_TEXT:
        raise SeqvaeError(f"--scaffold: longer than {MAX_SCAFFOLD_TEXT} characters")
    with rdBase.BlockLogs():
        molecule = None if _SMARTS_ONLY.search(text) else Chem.MolFromSmiles(text)
        if molecule is not None:
            return Scaffold(text, molecule, molecule, smarts=False)
        query = Chem.MolFromSmarts(text)
        if query is None:
            raise SeqvaeError(f"--scaffold {text!r}: neither a SMILES nor a SMARTS RDKit can read")
        written = Chem.MolFromSmiles(Chem.MolToSmiles(query))
        if written is not None and not written.HasSubstructMatch(query):
            written = None
        return Scaffold(text, query, written, smarts=True)


def rooted_smiles(mol, ends: Sequence[int], kekule: bool, count: int,
                  rng: np.random.Generator, tries: int = 40) -> list[str]:
    """Up to ``count`` distinct random SMILES of ``mol`` whose last written atom is one of
    ``ends`` (atom indices), spread evenly over them: each is a prefix whose continuation bonds
    to that atom.

    Args:
      mol: an RDKit molecule.
      ends: the atoms a SMILES may end at.
      kekule: write Kekule SMILES (no aromatic atoms), as a ``data.kekulize`` run reads them.
      count: how many at most.
      rng: draws each writing's atom order and root atom.
      tries: random writings per wanted SMILES.
    """
    from rdkit import Chem, rdBase

    mol = Chem.Mol(mol)
    if kekule:
        try:
            Chem.Kekulize(mol, clearAromaticFlags=True)
        except Exception:  # noqa: BLE001 - RDKit raises KekulizeException and friends
            return []
    ends = set(int(atom) for atom in ends)
    by_end: dict[int, list[str]] = {atom: [] for atom in sorted(ends)}
    seen: set[str] = set()
    atoms = mol.GetNumAtoms()
    each = -(-count // max(len(by_end), 1))  # per end, so that every end gets its share
    with rdBase.BlockLogs():
        for _ in range(tries * count):
            # a random atom order written without canonical ranking: a random SMILES that
            # numpy's generator, not RDKit's global one, decides (the same for a seed)
            order = [int(atom) for atom in rng.permutation(atoms)]
            shuffled = Chem.RenumberAtoms(mol, order)
            text = Chem.MolToSmiles(shuffled, kekuleSmiles=kekule, canonical=False,
                                    rootedAtAtom=int(rng.integers(atoms)))
            written = list(shuffled.GetPropsAsDict(True, True)["_smilesAtomOutputOrder"])
            last = order[int(written[-1])]
            if last in by_end and text not in seen and len(by_end[last]) < each:
                seen.add(text)
                by_end[last].append(text)
                if len(seen) >= each * len(by_end):
                    break
    spread = []  # round robin over the ends: every attachment point as often
    for k in range(max((len(v) for v in by_end.values()), default=0)):
        spread += [texts[k] for texts in by_end.values() if k < len(texts)]
    return spread[:count]


def attachment_points(mol, atoms: Sequence[int] | None = None) -> list[int]:
    """The atoms (of ``atoms``, default all) that carry a hydrogen: where a substituent can bond."""
    atoms = range(mol.GetNumAtoms()) if atoms is None else atoms
    return [int(atom) for atom in atoms if mol.GetAtomWithIdx(int(atom)).GetTotalNumHs() > 0]


class Decorations:
    """Prefixes that make the decoder write the scaffold first, then decorate it.

    Args:
      run: a SMILES run.
      scaffold: from ``parse_scaffold``, with a ``molecule``.
      seed: draws the rooted SMILES.

    Raises:
      SeqvaeError: the run cannot write the scaffold (a token outside its vocabulary, or longer
        than its ``max_len``).
    """

    def __init__(self, run: Run, scaffold: Scaffold, seed: int = 0):
        self.run, self.scaffold = run, scaffold
        self.kekule = bool(run.config.data.kekulize)
        self.rng = np.random.default_rng([seed, 0x5CAF])
        mol = scaffold.molecule
        ends = attachment_points(mol) or list(range(mol.GetNumAtoms()))
        texts = rooted_smiles(mol, ends, self.kekule, MAX_PREFIXES, self.rng)
        ids, lengths = self._encode(texts)
        if not len(ids):
            raise SeqvaeError(f"--scaffold {scaffold.text!r}: this run cannot write it (a token "
                              f"outside its vocabulary of {len(run.vocab) - 4}, or longer than "
                              f"{run.max_len - 1} tokens)")
        self.ids, self.lengths = ids, lengths
        self.grown_ids = np.zeros((0, run.max_len), np.int32)
        self.grown_lengths = np.zeros((0,), np.int32)

    def _encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids ``(K, max_len)`` of prefixes the run can write, and their lengths ``(K,)``
        (tokens before ``<eos>``); room is left for a decoration."""
        encoded = encode_texts(self.run.codec, texts, on_error="skip", check_molecules=False,
                               notations=texts)
        lengths = np.argmax(encoded.ids == EOS_ID, axis=1).astype(np.int32) if len(
            encoded.ids) else np.zeros((0,), np.int32)
        keep = lengths < self.run.max_len - 2
        return encoded.ids[keep].astype(np.int32), lengths[keep]

    def grow(self, molecules: Sequence[str], limit: int = 200) -> None:
        """Adds prefixes of decorated molecules (canonical SMILES holding the scaffold), each
        written to end at one of the scaffold's attachment points not yet decorated: the
        decoder then adds a second substituent there. Keeps the last ``limit`` such prefixes."""
        from rdkit import Chem, rdBase

        texts = []
        with rdBase.BlockLogs():
            for smiles in molecules:
                mol = Chem.MolFromSmiles(smiles)
                match = mol.GetSubstructMatch(self.scaffold.query) if mol is not None else ()
                ends = attachment_points(mol, match) if match else []
                if ends:
                    texts += rooted_smiles(mol, ends, self.kekule, 1, self.rng, tries=20)
        if texts:
            ids, lengths = self._encode(texts)
            self.grown_ids = np.concatenate([self.grown_ids, ids])[-limit:]
            self.grown_lengths = np.concatenate([self.grown_lengths, lengths])[-limit:]

    def draw(self, count: int, grown_share: float = 0.25) -> tuple[np.ndarray, np.ndarray]:
        """``count`` prefixes, ids int32 ``(count, max_len)`` and lengths ``(count,)``: the
        scaffold's own rooted SMILES in turn, and up to ``grown_share`` of them from decorated
        molecules (``grow``)."""
        grown = min(int(count * grown_share), len(self.grown_ids) and count)
        rows = self.rng.integers(len(self.ids), size=count - grown)
        extra = self.rng.integers(max(len(self.grown_ids), 1), size=grown)
        ids = np.concatenate([self.ids[rows], self.grown_ids[extra]])
        lengths = np.concatenate([self.lengths[rows], self.grown_lengths[extra]])
        order = self.rng.permutation(count)
        return ids[order], lengths[order]
