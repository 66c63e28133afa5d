"""The in-graph SMILES grammar: tables, the state machine on real and broken SMILES, masked
decoding from a stub (every output parses), and the XLA / tf.function paths."""

import importlib.util

import numpy as np
import pytest
import tensorflow as tf

from seqvae.data.tokenizers import SmilesTokenizer
from seqvae.data.vocabulary import BOS_ID, EOS_ID, PAD_ID, Vocabulary
from seqvae.model import decoding
from seqvae.model import grammar_decoding
from seqvae.model.grammar import SmilesGrammar
from seqvae.model.smiles_tokens import (ATOM, BOND, CLOSE, END, OPEN, OTHER, RING, atom_valence,
                                        token_class)

VALID = [
    "CCO", "c1ccccc1", "CC(C)(C)C", "O=C(O)c1ccccc1N", "C1CC2CCC1C2", "C#N", "C=C/C=C/C",
    "C[C@@H](N)C(=O)O", "c1ccc2[nH]ccc2c1", "C[N+](C)(C)C", "[O-][N+](=O)c1ccccc1",
    "FC(F)(F)Cl", "C%10CCCCC%10", "O=S(=O)(N)c1ccc(Br)cc1", "C=1CCCCC=1", "CC(=O)OC1CCCC1",
    "c1cc[n+]([O-])cc1", "N#Cc1ccc(-c2ccccc2)cc1", "CC.O", "C1CCC(CC1)C(=O)N",
    "C1(=C)CCC1", "C1=CC=CC=C1", "C1CC=CCC=1", "C12(CC1)CC2", "C1CC2CC1CC2",
]
TOKENIZER = SmilesTokenizer()


def _vocab(texts):
    return Vocabulary.fit([TOKENIZER.tokenize(t) for t in texts + VALID])


def _ids(vocab, tokenized, width, add_eos=None):
    """Token lists as padded ids ``(N, width)``, each with <eos> unless ``add_eos[i]`` is False."""
    ids = np.zeros((len(tokenized), width), np.int32)
    for row, tokens in enumerate(tokenized):
        encoded = vocab.encode(tokens, add_eos=True if add_eos is None else add_eos[row])
        ids[row, :len(encoded)] = encoded
    return ids


def _first_violations(texts, vocab, max_len=40):
    grammar = SmilesGrammar.from_tokens(vocab.tokens)
    ids = _ids(vocab, [TOKENIZER.tokenize(t) for t in texts], max_len,
               add_eos=[not t.endswith("!") for t in texts])
    return grammar.first_violation(tf.constant(ids)).numpy().tolist()


def test_atom_valences_and_classes():
    assert [atom_valence(t) for t in ("C", "N", "O", "F", "Cl", "c", "[nH]", "[N+]", "[C@@H]",
                                      "[NH3+]", "*")] == [4, 3, 2, 1, 1, 4, 2, 4, 3, 1, 8]
    assert atom_valence("(") is None and atom_valence("=") is None
    # a charged atom holds what the element with as many electrons holds (RDKit's rule)
    assert [atom_valence(t) for t in ("[O-]", "[N-]", "[C-]", "[B-]", "[S-]", "[P+]", "[o+]",
                                      "[n-]", "[NH4+]", "[Na+]", "[Cl-]", "[Pt+2]")] == [
        1, 2, 3, 4, 1, 4, 3, 2, 0, 0, 0, 8]
    # no more than RDKit's largest valence: P holds 5 (not 7), and so does S+ (as P)
    assert [atom_valence(t) for t in ("P", "[S+]", "[S@@+]", "S", "I")] == [5, 5, 5, 6, 5]
    assert [token_class(t) for t in ("C", "=", "(", ")", "1", "%12", "+", "[nH]")] == [
        ATOM, BOND, OPEN, CLOSE, RING, RING, OTHER, ATOM]


def test_every_valid_smiles_passes_step_by_step():
    vocab = _vocab([])
    assert _first_violations(VALID, vocab) == [-1] * len(VALID)


@pytest.mark.parametrize("text, position", [
    ("C1CC", 4),  # <eos> with ring 1 open
    ("C(C", 3),  # <eos> inside a branch
    ("C)", 1),  # ")" with no branch open
    ("(C", 0),  # a branch before any atom
    ("=C", 0),  # a bond before any atom
    ("C==C", 2),  # a bond after a bond
    ("C=F", 2),  # F cannot take a double bond
    ("C11", 2),  # a ring closed on the atom that opened it
    ("C(C)1CC1", 4),  # a ring label after a branch
    ("C(=1)C", 3),  # a ring label on no atom
    ("C1CC(F)=1", 8),  # ... or after a branch
    ("C()C", 2),  # an empty branch
    ("CC(C)(C)(C)C", 11),  # a fifth bond on a carbon
    ("FC(F)(F)(F)F", 11),
    ("OC(O)(O)(O)O", 11),
    ("C1C1", 3),  # a ring closing onto the atom's own neighbour
    ("C1(C)C1", 6),  # ... also after a branch
    ("C12CC12", 6),  # two rings from one atom closed on the same atom: a double bond
    ("C1(=C)CCC=1", 10),  # a double ring bond onto an opener with no unit left
    ("C#O", 2),  # O cannot take a triple bond
    ("C=", 2),  # <eos> after a bond
    ("C[O-]C", 2),  # O- holds one bond (as F)
    ("C1CC[O-]1", 4),  # ... a ring bond neither
])
def test_broken_smiles_are_stopped_where_they_break(text, position):
    vocab = _vocab([])
    assert _first_violations([text], vocab) == [position]


def test_an_ion_of_no_valence_stands_alone():
    vocab = _vocab(["[Na+]", "[NH4+]"])
    assert _first_violations(["[Na+]", "C.[Na+]", "[NH4+]", "[Na+]C", "C[NH4+]"], vocab) == [
        -1, -1, -1, 1, 1]


def test_the_prefix_keeps_room_to_close_within_max_len():
    vocab = _vocab([])
    grammar = SmilesGrammar.from_tokens(vocab.tokens)
    state = grammar.initial_state(1)
    for token in ["<bos>"] + TOKENIZER.tokenize("C1CC(C"):
        state = grammar.update(state, tf.constant([vocab.encode([token], add_eos=False)[0]]))
    # 6 tokens so far; with 3 left the only way out is "1" ")" <eos> ("C1CC(C1)"): ")" first
    # would need an atom to close the ring on.
    tight = grammar.allowed(state, 6 + 3).numpy()[0]
    assert [vocab.tokens[i] for i in np.flatnonzero(tight)] == ["1"]
    roomy = grammar.allowed(state, 6 + 4).numpy()[0]
    assert {")", "C", "1"} <= {vocab.tokens[i] for i in np.flatnonzero(roomy)}


def _allowed_after(prefix, max_len):
    vocab = _vocab([])
    grammar = SmilesGrammar.from_tokens(vocab.tokens)
    state = grammar.initial_state(1)
    for token in ["<bos>"] + TOKENIZER.tokenize(prefix):
        state = grammar.update(state, tf.constant([vocab.encode([token], add_eos=False)[0]]))
    return {vocab.tokens[i] for i in np.flatnonzero(grammar.allowed(state, max_len).numpy()[0])}


def test_a_ring_needs_two_more_atoms_than_its_opener():
    # "C1CC1" + <eos> is the shortest ring: its opener's neighbour cannot close it.
    assert "1" in _allowed_after("C", 6) and "1" not in _allowed_after("C", 5)
    # Back from a branch on the opener, the next atom is its neighbour again: "C1(F)CC1".
    assert ")" in _allowed_after("C1(F", 9) and ")" not in _allowed_after("C1(F", 8)
    # A bond on the opener: "C1=CC1" needs 7 tokens.
    assert "=" in _allowed_after("C1", 7) and "=" not in _allowed_after("C1", 6)


def _stub_step(vocab_size, seed):
    """Logits that ignore the state: random but fixed per (step, token); never <pad>, <bos>."""
    ban = tf.constant([-1e9 if i in (PAD_ID, BOS_ID) else 0.0 for i in range(vocab_size)])
    table = tf.random.stateless_normal([64, vocab_size], [seed, 1]) * 3.0 + ban

    def step(tokens, position):  # position (B,): batch-major, so compacting can drop rows
        return tf.gather(table, position), position + 1

    return step


@pytest.mark.parametrize("compact", [False, True])
def test_masked_random_decoding_always_parses(compact):
    from rdkit import Chem, rdBase

    # Aliphatic vocabulary: nothing is left to aromaticity, so every output must parse.
    vocab = _vocab(["CC(=O)N", "C#N", "C1CC2CC1C2", "FC(Cl)Br"])
    tokens = [t for t in vocab.tokens if t.islower() is False and not t.startswith("[")]
    vocab = Vocabulary([t for t in tokens if t not in ("<pad>", "<bos>", "<eos>", "<unk>")
                        and t not in ("c", "n", "o", "s", ".")])
    grammar = SmilesGrammar.from_tokens(vocab.tokens)
    max_len, batch = 30, 200
    stepper = _stub_step(len(vocab), seed=3)

    # compiled=True with batch < COMPILED_MIN_ROWS: the packed state through plain ops
    masked_step, state = grammar.masked_step_fn(stepper, tf.zeros([batch], tf.int32), batch,
                                                max_len, compiled=True)
    ids = decoding.decode_loop(masked_step, state, batch, max_len, BOS_ID, EOS_ID,
                               seed=tf.constant([1, 2]), compact=compact).numpy()
    texts = ["".join(vocab.decode([i for i in row if i not in (PAD_ID, EOS_ID)])) for row in ids]
    assert all(EOS_ID in row for row in ids)  # every sequence closed within max_len
    with rdBase.BlockLogs():
        parsed = sum(Chem.MolFromSmiles(t) is not None and bool(t) for t in texts)
    # Random logits are the worst case: they walk into the rare dead ends the mask's bounds
    # do not foresee (an atom with too few units left both to close a ring and to go on, near
    # max_len), which the mask then ends at <eos>.
    assert parsed >= 0.98 * batch
    unmasked = decoding.decode_loop(stepper, tf.zeros([batch], tf.int32), batch, max_len, BOS_ID,
                                    EOS_ID, seed=tf.constant([1, 2])).numpy()
    with rdBase.BlockLogs():
        raw = ["".join(vocab.decode([i for i in row if i not in (PAD_ID, EOS_ID)])) for row in unmasked]
        assert sum(Chem.MolFromSmiles(t) is not None for t in raw) < batch // 2  # the mask mattered


def test_packed_state_round_trips():
    grammar = SmilesGrammar.from_tokens(_vocab(["C1CC(=O)C1", "C#N"]).tokens)
    state = grammar.initial_state(3)
    state = grammar.update(state, tf.constant([4, 5, 6]))
    packed = grammar._pack(state)
    assert packed.shape == (3, sum(1 if v.shape.rank == 1 else v.shape[1] for v in state.values()))
    unpacked = grammar._unpack(packed)
    assert list(unpacked) == list(state)
    for name, value in state.items():
        np.testing.assert_array_equal(unpacked[name].numpy(), value.numpy(), err_msg=name)


@pytest.mark.parametrize("compact, in_graph", [(True, True), (False, False)])
def test_compiled_mask_decodes_what_the_plain_mask_decodes(compact, in_graph, monkeypatch):
    """The XLA-compiled state machine (rows padded to B while the compacting loop shrinks
    the batch) gives the plain graph's masks, so the same samples; beam search too."""
    monkeypatch.setattr(grammar_decoding, "COMPILED_MIN_ROWS", 2)  # (the default is 256)
    vocab = _vocab(["CC(=O)N", "C#N", "C1CC2CC1C2", "FC(Cl)Br", "c1ccccc1O"])
    grammar = SmilesGrammar.from_tokens(vocab.tokens)
    max_len, batch = 24, 50
    stepper = _stub_step(len(vocab), seed=5)

    def decode(compiled, beam):
        masked_step, state = grammar.masked_step_fn(stepper, tf.zeros([batch], tf.int32), batch,
                                                    max_len, compiled=compiled)
        if beam:
            return decoding.beam_search(masked_step, state, batch, max_len, 3, BOS_ID, EOS_ID)[0]
        return decoding.decode_loop(masked_step, state, batch, max_len, BOS_ID, EOS_ID,
                                    seed=tf.constant([4, 2]), compact=compact)

    for beam in (False, True):
        run = (lambda compiled: tf.function(lambda: decode(compiled, beam))()) if in_graph else (
            lambda compiled: decode(compiled, beam))
        plain, compiled = run(False).numpy(), run(True).numpy()
        np.testing.assert_array_equal(plain, compiled)
        assert (plain == EOS_ID).any(1).all()
        if not beam:  # (the stub's logits ignore z: every row's beam finds the same sequence)
            assert len({tuple(row) for row in plain}) > batch // 2  # real, varied sequences
            lengths = (plain != PAD_ID).sum(1)
            assert lengths.min() < lengths.max()  # rows finished at different steps


def test_mask_compiles_under_xla_and_matches_eager():
    # Short strings, valid and not: XLA compiles the 12 unrolled steps (40 took minutes).
    texts = [t for t in VALID if len(TOKENIZER.tokenize(t)) < 12] + ["C(C", "C1CC", "C=(C)O",
                                                                     "CC)", "C#C#C", "O=O=O"]
    vocab = _vocab([])
    grammar = SmilesGrammar.from_tokens(vocab.tokens)
    ids = _ids(vocab, [TOKENIZER.tokenize(t) for t in texts], 12)
    eager = grammar.first_violation(tf.constant(ids)).numpy()
    compiled = tf.function(grammar.first_violation, jit_compile=True)(tf.constant(ids)).numpy()
    np.testing.assert_array_equal(eager, compiled)
    assert (eager[-6:] >= 0).all() and (eager[:-6] < 0).all()  # the mask saw both kinds


def test_one_token_check_is_the_full_masks_entry():
    """``allowed(state, L, tokens=)`` (what rejection asks of a drawn token) is the full mask's
    entry for every state and every token: states along random masked decodings (rings,
    branches, bonds and dead ends near max_len) and real molecules, eagerly and under XLA."""
    vocab = _vocab(["CC(=O)N", "C#N", "C1CC2CC1C2", "FC(Cl)Br", "c1ccccc1O", "C=C[N+](=O)[O-]"])
    grammar = SmilesGrammar.from_tokens(vocab.tokens)
    max_len, batch, v = 16, 120, len(vocab)
    masked_step, state = grammar.masked_step_fn(_stub_step(v, seed=9), tf.zeros([batch], tf.int32),
                                                batch, max_len)
    decoded = decoding.decode_loop(masked_step, state, batch, max_len, BOS_ID, EOS_ID,
                                   seed=tf.constant([3, 3])).numpy()
    real = _ids(vocab, [TOKENIZER.tokenize(t) for t in VALID if len(TOKENIZER.tokenize(t)) < 15],
                max_len)
    ids = np.concatenate([decoded, real])
    rows = len(ids)
    compiled = tf.function(lambda state, tokens: grammar.allowed(state, max_len, tokens=tokens),
                           jit_compile=True)
    every_token = tf.tile(tf.range(v), [rows])  # row i asks about token j at i * V + j
    state = grammar.update(grammar.initial_state(rows), tf.fill([rows], BOS_ID))
    allowed_somewhere = np.zeros(v, bool)
    for t in range(max_len):
        full = grammar.allowed(state, max_len).numpy()
        tiled = tf.nest.map_structure(lambda s: tf.repeat(s, v, axis=0), state)
        one = grammar.allowed(tiled, max_len, tokens=every_token).numpy().reshape(rows, v)
        np.testing.assert_array_equal(one, full, err_msg=f"step {t}")
        np.testing.assert_array_equal(compiled(tiled, every_token).numpy().reshape(rows, v), full)
        allowed_somewhere |= full.any(0)
        state = grammar.update(state, tf.constant(ids[:, t]))
    classes = {token_class(vocab.tokens[i]) for i in np.flatnonzero(allowed_somewhere)}
    assert {ATOM, BOND, OPEN, CLOSE, RING, END} <= classes  # every kind of token was asked


@pytest.mark.skipif(importlib.util.find_spec("moses") is None, reason="needs the molsets data")
@pytest.mark.parametrize("kekulize", [False, True])
def test_real_molecules_pass_step_by_step(kekulize):
    """A sample of MOSES train (bench/grammar_coverage.py runs the whole split)."""
    from seqvae.data.chemistry import kekule_smiles
    from seqvae.data.sources import read_sequences

    texts = read_sequences("moses:train", limit=3000).texts[::3]
    if kekulize:
        texts = [kekule_smiles(text) for text in texts]
    tokenized = [TOKENIZER.tokenize(text) for text in texts]
    vocab = Vocabulary.fit(tokenized)
    ids = _ids(vocab, tokenized, max(map(len, tokenized)) + 1)
    first = SmilesGrammar.from_tokens(vocab.tokens).first_violation(tf.constant(ids)).numpy()
    assert [texts[i] for i in np.flatnonzero(first >= 0)] == []


def test_teacher_forced_masks_are_the_step_by_step_masks():
    vocab = _vocab([])
    grammar = SmilesGrammar.from_tokens(vocab.tokens)
    texts = ["CC(=O)O", "C1CCCCC1", "c1ccccc1N"]
    ids = _ids(vocab, [TOKENIZER.tokenize(t) for t in texts], 12)
    masks = grammar.teacher_forced_masks(tf.constant(ids), 20).numpy()
    assert masks.shape == (3, 12, len(vocab))
    assert masks[np.arange(3)[:, None], np.arange(12)[None, :], ids].all()  # targets allowed
    state = grammar.update(grammar.initial_state(3), tf.fill([3], BOS_ID))
    for t in range(12):
        expected = grammar.allowed(state, 20).numpy() | (np.arange(len(vocab)) == ids[:, t:t + 1])
        np.testing.assert_array_equal(masks[:, t], expected)
        state = grammar.update(state, tf.constant(ids[:, t]))
    compiled = tf.function(grammar.teacher_forced_masks, jit_compile=True)(tf.constant(ids), 20)
    np.testing.assert_array_equal(compiled.numpy(), masks)


@pytest.mark.parametrize("compact, compiled, in_graph", [
    (True, False, False), (True, True, True), (False, False, True), (False, True, False)])
def test_rejection_decoding_stops_each_row_where_the_check_rejects_it(compact, compiled, in_graph,
                                                                       monkeypatch):
    """``masked_step_fn(reject=True)`` + ``decode_loop(stop_fn=rejects)`` decode without the
    mask and stop a row at its first forbidden token: the rows it rejects are those
    ``first_violation`` rejects in the unmasked decoding of the same seed, their ids are that
    decoding's up to the forbidden token, and the rows it keeps are the unmasked (and the
    masked) decoding's whole."""
    monkeypatch.setattr(grammar_decoding, "COMPILED_MIN_ROWS", 2)  # (the default is 256)
    vocab = _vocab(["CC(=O)N", "C#N", "C1CC2CC1C2", "FC(Cl)Br", "c1ccccc1O"])
    grammar = SmilesGrammar.from_tokens(vocab.tokens)
    max_len, batch, seed = 24, 300, tf.constant([6, 1])
    # Random logits that favour "C" and, from the third token on, <eos>: some rows end clean,
    # others emit a token the grammar forbids.
    random_step = _stub_step(len(vocab), seed=7)
    favour = np.zeros([2, len(vocab)], np.float32)
    favour[:, vocab.tokens.index("C")] = 9.0
    favour[1, EOS_ID] = 8.0

    def stepper(tokens, position):
        logits, after = random_step(tokens, position)
        return logits + tf.gather(favour, tf.minimum(position // 2, 1)), after

    start = tf.zeros([batch], tf.int32)

    def decode(reject):
        step, state = (grammar.masked_step_fn(stepper, start, batch, max_len, compiled=compiled,
                                              reject=True) if reject else (stepper, start))
        return decoding.decode_loop(step, state, batch, max_len, BOS_ID, EOS_ID, seed=seed,
                                    compact=compact,
                                    stop_fn=grammar.rejection_check(batch, max_len, compiled)
                                    if reject else None)

    run = (lambda reject: tf.function(lambda: decode(reject))()) if in_graph else decode
    ids, rejected = (t.numpy() for t in run(True))
    unmasked = run(False).numpy()
    first = grammar.first_violation(tf.constant(unmasked)).numpy()
    np.testing.assert_array_equal(rejected, first >= 0)
    assert 0.1 * batch < rejected.sum() < 0.9 * batch
    np.testing.assert_array_equal(ids[~rejected], unmasked[~rejected])
    for row in np.flatnonzero(rejected):
        stop = first[row]
        np.testing.assert_array_equal(ids[row, :stop + 1], unmasked[row, :stop + 1])
        assert (ids[row, stop + 1:] == PAD_ID).all()
    masked_step, state = grammar.masked_step_fn(stepper, start, batch, max_len)
    masked = decoding.decode_loop(masked_step, state, batch, max_len, BOS_ID, EOS_ID, seed=seed,
                                  compact=compact).numpy()
    np.testing.assert_array_equal(masked[~rejected], ids[~rejected])
    assert not (masked[rejected] == ids[rejected]).all(1).any()
