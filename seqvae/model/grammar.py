"""An in-graph SMILES grammar: per decoding step, the tokens that keep the prefix completable.

A state machine over batched int32 tensors (it runs inside ``tf.while_loop``, ``tf.function``,
XLA and the exported SavedModel). Per sequence it tracks:

- the class of the previous token (start, atom, bond, ``(``, ``)``, ring label, ``.``, end);
- the branch depth, and a stack of the remaining valence of the last atom at each depth;
- which level the next bond attaches to (the atom before ``(`` inside a fresh branch);
- the order of a pending bond token (``=`` waits for its atom or ring label);
- the open ring-closure labels, the bond order each was opened with and the atom that opened
  each (``C11`` is not a ring, and a ring cannot close onto a neighbour: ``C1C1``, or twice
  onto the same atom: ``C12CC12``);
- the position, so the prefix can still be closed (branches, rings, ``<eos>``) within max_len.

From it, ``allowed`` gives a ``(B, V)`` mask. Tables come from the run's vocabulary, so any SMILES
vocabulary works; tokens that cannot appear outside brackets (``+``, ``@``, ...) and ``<unk>``
are never allowed. Valence is counted in bond-order units with a generous table (an aromatic
atom's implicit bonds count 1, ``c`` may hold 4 units for ``c(=O)``), so the mask never forbids a
molecule RDKit accepts (``bench/grammar_coverage.py`` checks the MOSES train split), hypervalent
F, Cl and Br aside (RDKit reads ``O=BrO``; the mask holds them to one bond); what it cannot
decide from a prefix — aromaticity that does not kekulize, stereo — is left to RDKit.
``tests/model/test_grammar_oracle.py`` checks it against partialsmiles, a validating parser of
partial SMILES.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import tensorflow as tf

from seqvae.data.vocabulary import BOS_ID, EOS_ID

# Token classes (the previous-token state uses START..END).
START, ATOM, BOND, OPEN, CLOSE, RING, DOT, END, OTHER, SPECIAL = range(10)
NUM_CLASSES = SPECIAL + 1

_BOND_ORDERS = {"-": 1, "=": 2, "#": 3, "$": 4, ":": 1, "/": 1, "\\": 1}
# Largest valence of each element (bond-order units); generous where RDKit allows several.
_MAX_VALENCE = {
    "H": 1, "He": 0, "Li": 1, "Be": 2, "B": 3, "C": 4, "N": 3, "O": 2, "F": 1, "Na": 1, "Mg": 2,
    "Al": 3, "Si": 4, "P": 7, "S": 6, "Cl": 1, "K": 1, "Ca": 2, "Ge": 4, "As": 5, "Se": 6,
    "Br": 1, "Sn": 4, "Sb": 5, "Te": 6, "I": 5, "Xe": 8, "*": 8,
}
# Aromatic atoms: implicit aromatic bonds count 1 unit each (c: 3 ring bonds, or 2 and a =O).
_AROMATIC_VALENCE = {"b": 3, "c": 4, "n": 3, "o": 2, "p": 4, "s": 4, "se": 4, "te": 4, "as": 4}
_ORGANIC = {"B", "C", "N", "O", "P", "S", "F", "Cl", "Br", "I", "*", "b", "c", "n", "o", "p", "s"}
_BRACKET = re.compile(r"\[(\d*)(\*|[A-Z][a-z]?|[a-z][a-z]?)(@[A-Z]{2}\d+|@*)(H\d*)?([+-]+\d*)?"
                      r"(:\d+)?\]")
_RING_LABEL = re.compile(r"%\d\d|\d")
_UNKNOWN_VALENCE = 8


def atom_valence(token: str) -> int | None:
    """Bond-order units an atom token can hold (its hydrogens subtracted), or None if not an atom.

    >>> atom_valence("C"), atom_valence("[nH]"), atom_valence("[N+]"), atom_valence("Cl")
    (4, 2, 4, 1)
    """
    if token in _ORGANIC:
        return _AROMATIC_VALENCE.get(token, _MAX_VALENCE.get(token, _UNKNOWN_VALENCE))
    match = _BRACKET.fullmatch(token)
    if not match:
        return None
    _, symbol, _, hydrogens, charge, _ = match.groups()
    base = _AROMATIC_VALENCE.get(symbol) if symbol.islower() else _MAX_VALENCE.get(symbol)
    base = _UNKNOWN_VALENCE if base is None else base
    h_count = 0 if not hydrogens else int(hydrogens[1:] or 1)
    charge_size = 0
    if charge:
        digits = charge.lstrip("+-")
        charge_size = int(digits) if digits else len(charge)
    # A charge can raise the valence (N+ 4, B- 4) or lower it (O- 1): count it up (generous).
    return max(base + charge_size - h_count, 0)


def token_class(token: str) -> int:
    """The grammar class of one vocabulary token."""
    if token in ("<pad>", "<bos>", "<unk>"):
        return SPECIAL
    if token == "<eos>":
        return END
    if atom_valence(token) is not None:
        return ATOM
    if token in _BOND_ORDERS:
        return BOND
    if token == "(":
        return OPEN
    if token == ")":
        return CLOSE
    if _RING_LABEL.fullmatch(token):
        return RING
    if token == ".":
        return DOT
    return OTHER


# The decoder's view of the state (``SmilesGrammar.features``): the previous token's class
# (one-hot, START..SPECIAL), then six scaled counts.
FEATURE_DIM = NUM_CLASSES + 6

# Decoding batches from this many rows on run the state machine under XLA
# (``SmilesGrammar.masked_step_fn``).
COMPILED_MIN_ROWS = 256


@dataclass(frozen=True)
class SmilesGrammar:
    """Per-token tables (numpy, ``(V,)``) of a SMILES vocabulary, and the state machine over them.

    Build with ``SmilesGrammar.from_tokens(vocab.tokens)``.
    """

    classes: np.ndarray  # (V,) token class
    valence: np.ndarray  # (V,) atom: bond-order units it can hold; else 0
    bond_order: np.ndarray  # (V,) bond token: its order; else 0
    ring_label: np.ndarray  # (V,) ring token: its label index 0..R-1; else -1
    num_labels: int  # R
    max_depth: int = 12  # deepest branch nesting tracked

    @classmethod
    def from_tokens(cls, tokens: Sequence[str], max_depth: int = 12) -> "SmilesGrammar":
        classes = np.array([token_class(t) for t in tokens], np.int32)
        valence = np.array([atom_valence(t) or 0 for t in tokens], np.int32)
        bond_order = np.array([_BOND_ORDERS.get(t, 0) for t in tokens], np.int32)
        labels = sorted({t for t in tokens if _RING_LABEL.fullmatch(t)})
        ring_label = np.array([labels.index(t) if t in labels else -1 for t in tokens], np.int32)
        return cls(classes, valence, bond_order, ring_label, max(len(labels), 1), max_depth)

    @property
    def vocab_size(self) -> int:
        return len(self.classes)

    def initial_state(self, batch_size: int | tf.Tensor) -> dict[str, tf.Tensor]:
        """The state before the first token: a dict of batch-major int32 tensors."""
        zeros = tf.zeros([batch_size], tf.int32)
        return {
            "prev": zeros + START,  # (B,) class of the previous token
            "position": zeros,  # (B,) tokens emitted so far
            "depth": zeros,  # (B,) open branches
            "attach": zeros,  # (B,) depth level of the atom the next bond attaches to
            "pending": zeros,  # (B,) order of a bond token awaiting its atom / ring label
            "after_close": zeros,  # (B,) 1 from ")" until the next atom (a bond may follow it)
            "valence": tf.zeros([batch_size, self.max_depth], tf.int32),  # (B, D) units left
            "ring_open": tf.zeros([batch_size, self.num_labels], tf.int32),  # (B, R) 0/1
            "ring_order": tf.zeros([batch_size, self.num_labels], tf.int32),  # (B, R) bond order
            # Atom identities, so a ring cannot close onto the atom's own neighbour ("C1C1").
            "atoms": zeros,  # (B,) atoms placed so far
            "anchor_id": tf.zeros([batch_size, self.max_depth], tf.int32),  # (B, D) atom per level
            "parent": zeros - 1,  # (B,) the atom the current atom is bonded to (-1: none)
            "ring_atom": tf.zeros([batch_size, self.num_labels], tf.int32) - 1,  # (B, R) opener
            # Openers of the labels the current atom closed (two closures onto one atom would
            # be a second bond between them).
            "closed_onto": tf.zeros([batch_size, self.num_labels], tf.int32) - 1,  # (B, R)
            # Units the opener of each open label has left, for a closing bond of higher order.
            "ring_spare": tf.zeros([batch_size, self.num_labels], tf.int32),  # (B, R)
        }

    def _incoming_order(self, state):
        """Order of the bond that a next atom / ring label makes: (B,)."""
        prev = state["prev"]
        implicit = tf.where((prev == START) | (prev == DOT), 0, 1)
        return tf.where(prev == BOND, state["pending"], implicit)

    def update(self, state: dict[str, tf.Tensor], tokens: tf.Tensor) -> dict[str, tf.Tensor]:
        """Advances the state by the emitted ``tokens`` int32 ``(B,)``.

        ``<bos>`` and ``<pad>`` leave it unchanged.
        """
        tokens = tf.cast(tokens, tf.int32)
        cls = tf.gather(tf.constant(self.classes), tokens)
        is_ = {c: tf.equal(cls, c) for c in (ATOM, BOND, OPEN, CLOSE, RING, DOT, END)}
        counted = cls != SPECIAL
        depth, attach, prev = state["depth"], state["attach"], state["prev"]
        order_in = self._incoming_order(state)
        at_attach = tf.one_hot(attach, self.max_depth, dtype=tf.int32)  # (B, D)
        at_depth = tf.one_hot(depth, self.max_depth, dtype=tf.int32)

        # Ring labels: opening stores its bond order; closing spends the larger of the two.
        label = tf.gather(tf.constant(self.ring_label), tokens)
        label_hot = tf.one_hot(tf.where(is_[RING], label, -1), self.num_labels, dtype=tf.int32)
        was_open = tf.reduce_sum(label_hot * state["ring_open"], -1)  # (B,)
        stored = tf.reduce_sum(label_hot * state["ring_order"], -1)
        ring_spend = tf.where(was_open > 0, tf.maximum(order_in, stored), order_in)
        opening = label_hot * (1 - was_open)[:, None]  # (B, R)

        spend = tf.where(is_[ATOM], order_in, tf.where(is_[RING], ring_spend, 0))
        valence = state["valence"] - at_attach * spend[:, None]
        new_atom = tf.gather(tf.constant(self.valence), tokens) - order_in
        valence = tf.where((at_depth > 0) & is_[ATOM][:, None], new_atom[:, None], valence)

        anchor = tf.reduce_sum(at_attach * state["anchor_id"], -1)  # (B,) the current atom
        closing = label_hot * was_open[:, None]  # (B, R)
        closed_onto = tf.where(is_[ATOM][:, None], -1, state["closed_onto"])
        closed_onto = tf.where(closing > 0, state["ring_atom"], closed_onto)
        # The opener's spare units: what it has left when the label opens, less what it spends
        # on later bonds (an atom after it, more labels) while it is the current atom.
        on_anchor = tf.cast(tf.equal(state["ring_atom"], anchor[:, None]), tf.int32)
        ring_spare = state["ring_spare"] - on_anchor * spend[:, None]
        left_now = tf.reduce_sum(at_attach * valence, -1)  # (B,) after this token
        ring_spare = tf.where(opening > 0, left_now[:, None], ring_spare)
        fresh = (prev == START) | (prev == DOT)
        parent = tf.where(is_[ATOM], tf.where(fresh, -1, anchor), state["parent"])
        anchor_id = tf.where((at_depth > 0) & is_[ATOM][:, None], state["atoms"][:, None],
                             state["anchor_id"])
        new_depth = depth + tf.cast(is_[OPEN], tf.int32) - tf.cast(is_[CLOSE], tf.int32)
        return {
            "prev": tf.where(counted, cls, prev),
            "position": state["position"] + tf.cast(counted, tf.int32),
            "depth": new_depth,
            "attach": tf.where(is_[ATOM] | is_[CLOSE], new_depth, attach),
            "pending": tf.where(is_[BOND], tf.gather(tf.constant(self.bond_order), tokens), 0),
            "after_close": tf.where(is_[CLOSE], 1, tf.where(is_[BOND], state["after_close"], 0)),
            "valence": valence,
            "ring_open": state["ring_open"] + opening - label_hot * was_open[:, None],
            "ring_order": tf.where(opening > 0, order_in[:, None], state["ring_order"]),
            "atoms": state["atoms"] + tf.cast(is_[ATOM], tf.int32),
            "anchor_id": anchor_id,
            "parent": parent,
            "ring_atom": tf.where(opening > 0, anchor[:, None], state["ring_atom"]),
            "closed_onto": closed_onto,
            "ring_spare": ring_spare,
        }

    def _opened_on(self, state, level):
        """(B, R) 1 where a ring label is open and was opened by the atom at depth ``level``."""
        atom = tf.reduce_sum(tf.one_hot(level, self.max_depth, dtype=tf.int32)
                             * state["anchor_id"], -1)  # (B,)
        return state["ring_open"] * tf.cast(tf.equal(state["ring_atom"], atom[:, None]), tf.int32)

    def allowed(self, state: dict[str, tf.Tensor], max_len: int | tf.Tensor,
                tokens: tf.Tensor | None = None) -> tf.Tensor:
        """Tokens that keep the prefix completable within ``max_len`` tokens: bool ``(B, V)``.

        ``tokens`` int32 ``(B,)``: only whether each row's own token is allowed -> bool ``(B,)``
        (the same answer as the full mask's entry, with a column per row instead of V: what
        rejection sampling checks of a token it has drawn).
        """
        if tokens is None:  # every token: (1, V) tables against (B, 1) state
            def table(values):
                return tf.constant(values)[None, :]

            label_hot = tf.one_hot(tf.constant(self.ring_label), self.num_labels,
                                   dtype=tf.int32)  # (V, R), zero if -1

            def per_label(x):  # (B, R) -> (B, V): x at each token's ring label (0: none)
                return tf.matmul(x, label_hot, transpose_b=True)
        else:  # each row's token: (B, 1) tables
            tokens = tf.cast(tokens, tf.int32)

            def table(values):
                return tf.gather(tf.constant(values), tokens)[:, None]

            label_hot = tf.one_hot(tf.gather(tf.constant(self.ring_label), tokens),
                                   self.num_labels, dtype=tf.int32)  # (B, R)

            def per_label(x):
                return tf.reduce_sum(x * label_hot, -1, keepdims=True)
        classes = table(self.classes)  # (1, V) or (B, 1)
        prev = state["prev"][:, None]  # (B, 1)
        depth = state["depth"][:, None]
        order_in = self._incoming_order(state)[:, None]
        at_attach = tf.one_hot(state["attach"], self.max_depth, dtype=tf.int32)  # (B, D)
        current = tf.reduce_sum(at_attach * state["valence"], -1)[:, None]  # (B, 1) units left
        after_atom = (prev == ATOM) | (prev == RING) | (prev == CLOSE)
        open_count = tf.reduce_sum(state["ring_open"], -1)[:, None]
        fresh = (prev == START) | (prev == DOT)

        # A dead end is a state with rings open and no atom on the path (the current one, or
        # one ")" leads back to) with a unit left to bond on: no ring could close. ``below``:
        # the most units left on an enclosing level (the bond into a branch's first atom spent).
        enclosing = tf.range(self.max_depth)[None, :] < depth  # (B, D): levels below this one
        spent = state["valence"] - at_attach * order_in
        below = tf.reduce_max(tf.where(enclosing, spent, 0), -1)[:, None]
        below_now = tf.reduce_max(tf.where(enclosing, state["valence"], 0), -1)[:, None]
        atom_valence = table(self.valence)
        atom = (classes == ATOM) & (fresh | ((prev != END) & (current >= order_in))) & (
            atom_valence >= order_in) & (
            (open_count == 0) | (tf.maximum(below, atom_valence - order_in) >= 1))
        bond = ((classes == BOND) & (after_atom | (prev == OPEN))
                & (current >= table(self.bond_order)))
        branch = (classes == OPEN) & after_atom & (current >= 1) & (depth < self.max_depth - 1)
        close = ((classes == CLOSE) & after_atom & (depth > 0)
                 & ((open_count == 0) | (below_now >= 1)))

        is_open = per_label(state["ring_open"])  # (B, V)
        here = self._opened_on(state, state["attach"])  # (B, R) rings the current atom opened
        opened_here = per_label(here)  # (B, V)
        opener = per_label(state["ring_atom"] + 1) - 1  # (B, V)
        # Closing onto the atom's neighbour, or onto an atom it already closed a ring onto.
        twice = tf.reduce_any(tf.equal(opener[:, :, None], state["closed_onto"][:, None, :]), -1)
        onto_parent = (is_open > 0) & ((opener == state["parent"][:, None]) | twice)
        stored = per_label(state["ring_order"])
        ring_order = tf.where(is_open > 0, tf.maximum(order_in, stored), order_in)
        spare = per_label(state["ring_spare"])  # (B, V)
        opener_full = (is_open > 0) & (ring_order - stored > spare)
        # A ring label sits on an atom: after it, another label, or a bond that follows it
        # (not a bond that opens a branch: "C(=1" has no atom for the label; nor one after a
        # branch: "C(F)=1" puts the label after the branch).
        bond_on_atom = (prev == BOND) & ((state["attach"] == state["depth"])
                                         & (state["after_close"] == 0))[:, None]
        on_atom = (prev == ATOM) | (prev == RING) | bond_on_atom
        open_after = open_count + tf.where(is_open > 0, -1, 1)
        ring = ((classes == RING) & on_atom & (opened_here == 0) & ~onto_parent & ~opener_full
                & (current >= ring_order)
                & ((open_after == 0) | (tf.maximum(below_now, current - ring_order) >= 1)))
        end = (classes == END) & after_atom & (depth == 0) & (open_count == 0)
        dot = (classes == DOT) & after_atom & (depth == 0)
        mask = atom | bond | branch | close | ring | end | dot

        # Length: after this token, closing what is open still needs depth' ")", open' ring
        # labels, the atoms to put them on, and <eos>. Atoms: one after a bond, "(" or "."; the
        # rings that one atom opened close on as many different atoms, none of them its
        # neighbour (the next atom, while it is the current one or ")" returns to it); an atom
        # with fewer units left than open rings cannot close them all.
        depth_after = (depth + tf.cast(classes == OPEN, tf.int32)
                       - tf.cast(classes == CLOSE, tf.int32))
        opening = (classes == RING) & (is_open == 0)
        ring_delta = tf.where(is_open > 0, -1, 1) * tf.cast(classes == RING, tf.int32)
        needs_atom = (classes == BOND) | (classes == OPEN) | (classes == DOT) | opening | (
            (classes == CLOSE) & (open_count > 0))
        here_after = tf.reduce_sum(here, -1, keepdims=True) + tf.cast(opening, tf.int32)  # (B, V)
        there = self._opened_on(state, tf.maximum(state["depth"] - 1, 0))
        there_count = tf.reduce_sum(there, -1, keepdims=True) * tf.cast(depth > 0, tf.int32)
        same = tf.equal(state["ring_atom"][:, :, None], state["ring_atom"][:, None, :])
        shared = tf.reduce_sum(tf.cast(same, tf.int32) * state["ring_open"][:, None, :], -1)
        most = tf.reduce_max(shared * state["ring_open"], -1, keepdims=True)  # (B, 1)
        atoms = tf.maximum(tf.cast(needs_atom, tf.int32),
                           tf.where((classes == RING) & (is_open > 0), 0, most))
        atoms = tf.maximum(atoms, tf.where(
            ((classes == BOND) | (classes == OPEN) | (classes == RING)) & (here_after > 0),
            here_after + 1, 0))
        atoms = tf.maximum(atoms, tf.where((classes == CLOSE) & (there_count > 0),
                                           there_count + 1, 0))
        short = tf.cast(open_count > atom_valence - order_in, tf.int32)
        atoms = tf.where(classes == ATOM,
                         tf.maximum(tf.maximum(here_after, most - 1), short), atoms)
        needed = depth_after + open_count + ring_delta + atoms + 1
        needed = tf.where(classes == END, 0, needed)
        room = tf.cast(max_len, tf.int32) - state["position"][:, None] - 1
        mask &= needed <= room
        return mask if tokens is None else mask[:, 0]

    def masked_step_fn(self, step_fn, state: Any, batch_size: int | tf.Tensor,
                       max_len: int, compiled: bool = False,
                       reject: bool = False) -> tuple[Any, Any]:
        """Wraps a decoding step function so that forbidden tokens get -inf logits.

        With ``reject``, the logits stay as the model gives them and the step only advances the
        grammar's state, the last member of its state, for ``rejection_check``: the decoding
        loop stops a row at its first forbidden token (rejection sampling,
        ``decoding.sample_from_z``).

        Args:
          step_fn: ``(tokens (B,), state) -> (logits (B, V), state)``.
          state: its initial state.
          batch_size: B.
          max_len: the decoding length (the grammar keeps room to close what is open).
          compiled: run the state machine's step (``update`` and ``allowed``: some hundred
            small integer ops) as one XLA computation, its rows padded to B so that the
            compacting loop's shrinking batch compiles once (5-7x faster a step than the plain
            graph, the same masks: ``bench/grammar_step_cost.py``). False keeps plain graph ops
            (the exported SavedModel: it then runs where TensorFlow has no XLA JIT).

        Returns:
          ``(step_fn, state)`` for ``decode_loop``: the state pairs the inner state with the
          grammar's (all batch-major, so the compacting loop can drop finished rows; with
          ``compiled`` and no ``reject`` the grammar's fields are packed into one int32
          matrix, ``_pack``).
        """
        if reject:
            def advance(tokens, pair):
                logits, inner = step_fn(tokens, pair[0])
                return logits, (inner, self.update(pair[1], tokens))

            return advance, (state, self.initial_state(batch_size))
        initial, grammar_step, _ = self.stepper(batch_size, max_len, compiled)

        def step(tokens, pair):
            inner, grammar_state = pair
            grammar_state, allowed = grammar_step(grammar_state, tokens)
            logits, inner = step_fn(tokens, inner)
            logits = tf.where(allowed, logits, tf.constant(-1e9, logits.dtype))
            return logits, (inner, grammar_state)

        return step, (state, initial)

    @staticmethod
    def mask_from_state(step_fn, state: Any) -> tuple[Any, Any]:
        """``masked_step_fn`` for a step function that runs this grammar's ``stepper`` itself
        and keeps the tokens allowed next as the last member of its state (the decoder that
        reads the grammar, ``decoding.decoder_step_fn``): one state machine, not two."""
        def step(tokens, inner):
            logits, inner = step_fn(tokens, inner)
            return tf.where(inner[-1], logits, tf.constant(-1e9, logits.dtype)), inner

        return step, state

    def rejection_check(self, batch_size: int | tf.Tensor, max_len: int,
                        compiled: bool = False) -> Callable[[tf.Tensor, Any], tf.Tensor]:
        """The ``stop_fn`` of rejection decoding: ``(chosen int32 (B,), state) -> bool (B,)``,
        whether each row's drawn token is one the grammar forbids, for a decoding state whose
        last member is the grammar's state after the tokens before it (``masked_step_fn(...,
        reject=True)``, or the decoder that reads the grammar, ``decoding.decoder_step_fn``).

        It asks ``allowed`` about each row's own token, not the whole vocabulary: a dead end
        allows nothing, so it rejects what ``first_violation`` rejects. In plain ops a step of
        ``update`` and this check costs about half the full mask's; ``compiled`` runs the check
        under XLA (``_under_xla``), about as fast as the compiled mask
        (``bench/grammar_step_cost.py``).
        """
        def check(state, tokens):
            return self.allowed(state, max_len, tokens=tokens)

        if compiled:
            check = self._under_xla(check, batch_size)
        return lambda chosen, state: ~check(state[-1], chosen)

    def stepper(self, batch_size: int | tf.Tensor, max_len: int,
                compiled: bool = False) -> tuple[Any, Callable, Callable]:
        """The state machine as masked decoding steps it: ``(initial state, step(state, tokens
        (B,)) -> (state, allowed bool (B, V)), fields(state) -> the state's dict)``.

        ``compiled``: under XLA on a packed state (``_step`` through ``_under_xla``).
        """
        if compiled:  # the state as one int32 matrix: one op to pad, drop or gather rows
            def packed_step(packed, tokens):
                state, allowed = self._step(self._unpack(packed), tokens, max_len)
                return self._pack(state), allowed

            return (self._pack(self.initial_state(batch_size)),
                    self._under_xla(packed_step, batch_size), self._unpack)
        return (self.initial_state(batch_size), functools.partial(self._step, max_len=max_len),
                lambda s: s)

    def _pack(self, state: dict[str, tf.Tensor]) -> tf.Tensor:
        """The state as one int32 matrix ``(B, S)``: its fields side by side, in order."""
        return tf.concat([v[:, None] if v.shape.rank == 1 else v for v in state.values()], axis=1)

    def _unpack(self, packed: tf.Tensor) -> dict[str, tf.Tensor]:
        """``_pack``'s inverse."""
        state, column = {}, 0
        for name, value in self.initial_state(1).items():
            if value.shape.rank == 1:
                state[name] = packed[:, column]
                column += 1
            else:
                state[name] = packed[:, column:column + value.shape[1]]
                column += value.shape[1]
        return state

    def _step(self, state: dict[str, tf.Tensor], tokens: tf.Tensor,
              max_len: int) -> tuple[dict[str, tf.Tensor], tf.Tensor]:
        """One masked decoding step of the state machine: the state after ``tokens (B,)`` and
        the tokens allowed next, bool ``(B, V)``.

        A row with nothing allowed (a dead end the mask did not see coming: length or valence)
        may only emit ``<eos>``: it ends there and its text is counted invalid, not filled with
        garbage.
        """
        state = self.update(state, tokens)
        allowed = self.allowed(state, max_len)
        stuck = ~tf.reduce_any(allowed, -1, keepdims=True)
        return state, allowed | (stuck & tf.equal(tf.range(self.vocab_size), EOS_ID)[None, :])

    @staticmethod
    def _under_xla(function: Callable, batch_size: int | tf.Tensor) -> Callable:
        """``function(state, tokens (B,))`` (a nest of batch-major tensors in and out: some
        hundred small integer ops) compiled by XLA, for any number of rows up to ``batch_size``.

        XLA compiles once per input shape; the rows are padded to ``max(rows, B')``, B' the
        power of two from ``batch_size`` up (beam search has more rows than B), and the padding
        dropped again, so a decoding batch compiles once however its loop shrinks, and batches
        of other sizes (a sample's last, rejection's later rounds) rarely compile again. Padded
        rows are computed and thrown away: each row's state machine only reads its own row.
        Batches of a known size under ``COMPILED_MIN_ROWS`` rows keep the plain ops: there
        the compilation (about a second) costs more than the steps it saves. A batch whose size
        is known only when it runs is always compiled: its caller picks plain ops for small
        batches before the loop (``inference.decode_id_batches``), since a ``tf.cond`` at
        every step costs about as much as the XLA computation saves.
        """
        compiled = tf.function(function, jit_compile=True, reduce_retracing=True,
                               autograph=False)
        bucket = tf.cast(2 ** tf.math.ceil(tf.math.log(tf.cast(batch_size, tf.float32))
                                           / tf.math.log(2.0) - 1e-6), tf.int32)

        def padded(state, tokens):
            rows = tf.shape(tokens)[0]
            padding = tf.maximum(rows, bucket) - rows

            def pad(t):
                return tf.pad(t, [[0, padding]] + [[0, 0]] * (t.shape.rank - 1))

            out = compiled(tf.nest.map_structure(pad, state), pad(tokens))
            return tf.nest.map_structure(lambda t: t[:rows], out)

        def step(state, tokens):
            static_batch = tf.get_static_value(batch_size)
            if static_batch is not None and static_batch < COMPILED_MIN_ROWS:
                return function(state, tokens)
            if (static_batch is not None and tokens.shape[0] is not None
                    and tokens.shape[0] >= static_batch):
                return compiled(state, tokens)  # every row there (e.g. inside XLA): no padding
            return padded(state, tokens)

        return step

    def features(self, state: dict[str, tf.Tensor], max_len: int | tf.Tensor) -> tf.Tensor:
        """What the decoder reads of the state: float32 ``(B, FEATURE_DIM)``: the previous
        token's class one-hot, then the open branches, the open ring labels, the pending bond's
        order, whether a branch just closed, the valence left on the atom a bond would attach
        to (each scaled by 1/4, clipped at 1) and the share of ``max_len`` left."""
        def scaled(x, by=4.0):
            return tf.minimum(tf.cast(x, tf.float32) / by, 1.0)

        at_attach = tf.one_hot(state["attach"], self.max_depth, dtype=tf.int32)
        current = tf.reduce_sum(at_attach * state["valence"], -1)
        room = 1.0 - tf.cast(state["position"], tf.float32) / tf.cast(max_len, tf.float32)
        return tf.concat([tf.one_hot(state["prev"], NUM_CLASSES, dtype=tf.float32),
                          tf.stack([scaled(state["depth"]),
                                    scaled(tf.reduce_sum(state["ring_open"], -1)),
                                    scaled(state["pending"], 3.0),
                                    scaled(state["after_close"], 1.0),
                                    scaled(current), room], axis=1)], axis=1)

    def teacher_forced_features(self, ids: tf.Tensor, max_len: int | tf.Tensor) -> tf.Tensor:
        """``features`` before each target of known sequences ``ids (B, T)`` (after ``<bos>``
        and the targets before it): float32 ``(B, T, FEATURE_DIM)``, what the decoder reads
        at each teacher-forced step."""
        return self._along_targets(ids, tf.float32,
                                   lambda state, target: self.features(state, max_len))

    def teacher_forced_masks(self, ids: tf.Tensor, max_len: int | tf.Tensor,
                             include_targets: bool = True) -> tf.Tensor:
        """The mask at every position of known sequences: what a constrained softmax keeps.

        Args:
          ids: int ``(B, T)`` targets (``<eos>`` then ``<pad>`` after each sequence).
          max_len: the decoding length the masks keep room for (the run's ``max_len``).
          include_targets: also allow each position's own target (see Returns); False gives
            the grammar's masks alone.

        Returns:
          bool ``(B, T, V)``: at position t, the tokens the grammar allows after ``ids[:, :t]``,
          and always ``ids[:, t]`` itself (padding, and a target the grammar would reject, keep
          a finite likelihood).
        """
        def mask(state, target):
            allowed = self.allowed(state, max_len)
            if include_targets:
                allowed = allowed | tf.cast(tf.one_hot(target, self.vocab_size, dtype=tf.int32),
                                            tf.bool)
            return allowed

        return self._along_targets(ids, tf.bool, mask)

    def _along_targets(self, ids: tf.Tensor, dtype: tf.DType, read) -> tf.Tensor:
        """Walks the state machine along known sequences ``ids (B, T)`` (after ``<bos>``) and
        stacks ``read(state, target)`` ``(B, ...)`` taken before each target -> ``(B, T, ...)``."""
        ids = tf.cast(ids, tf.int32)
        batch, length = tf.shape(ids)[0], tf.shape(ids)[1]
        by_time = tf.transpose(ids)  # (T, B)
        out = tf.TensorArray(dtype, size=length)
        state = self.update(self.initial_state(batch), tf.fill([batch], BOS_ID))

        def body(t, state, out):
            target = by_time[t]
            return t + 1, self.update(state, target), out.write(t, read(state, target))

        _, _, out = tf.while_loop(lambda t, *_: t < length, body, (0, state, out))
        return tf.transpose(out.stack(), [1, 0, 2])

    def first_violation(self, ids: tf.Tensor) -> tf.Tensor:
        """For token ids ``(B, T)`` (<eos> then <pad> after each sequence): the first position
        whose token the mask forbids, or -1 where every token is allowed -> int32 ``(B,)``.

        A ``tf.while_loop`` over the positions, as the samplers step (an unrolled Python loop
        made a graph of some 20,000 ops for the demo's ``max_len``: 15 s to trace and slow to
        run), asking ``allowed`` about each row's own token, as ``rejection_check`` does while
        decoding (``inference.first_violations``, ``bench/grammar_coverage.py``)."""
        ids = tf.cast(ids, tf.int32)
        batch, length = tf.shape(ids)[0], ids.shape[1] or tf.shape(ids)[1]
        by_time = tf.transpose(ids)  # (T, B)

        def body(t, state, tokens, first):
            state = self.update(state, tokens)
            tokens = by_time[t]
            ok = self.allowed(state, length, tokens=tokens)
            ok = ok | tf.equal(state["prev"], END)
            return t + 1, state, tokens, tf.where((first < 0) & ~ok, t, first)

        _, _, _, first = tf.while_loop(
            lambda t, *_: t < length, body,
            (tf.constant(0), self.initial_state(batch), tf.fill([batch], BOS_ID),
             tf.fill([batch], -1)))
        return first


def grammar_for(tokens: Sequence[str], tokenizer: str) -> SmilesGrammar | None:
    """The grammar of a run's vocabulary, or None when the run does not speak SMILES."""
    return SmilesGrammar.from_tokens(tokens) if tokenizer == "smiles" else None


