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

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import tensorflow as tf


from seqvae.model.grammar_decoding import GrammarDecoding
from seqvae.model.grammar_sequences import GrammarAlongSequences
from seqvae.model.smiles_tokens import (ATOM, BOND, BOND_ORDERS, CLOSE, DOT, END, OPEN, RING,
                                        RING_LABEL, SPECIAL, START, atom_valence, token_class)


@dataclass(frozen=True)
class SmilesGrammar(GrammarDecoding, GrammarAlongSequences):
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
        bond_order = np.array([BOND_ORDERS.get(t, 0) for t in tokens], np.int32)
        labels = sorted({t for t in tokens if RING_LABEL.fullmatch(t)})
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


def grammar_for(tokens: Sequence[str], tokenizer: str) -> SmilesGrammar | None:
    """The grammar of a run's vocabulary, or None when the run does not speak SMILES."""
    return SmilesGrammar.from_tokens(tokens) if tokenizer == "smiles" else None
