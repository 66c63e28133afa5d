"""The grammar mask against an independent oracle: ``partialsmiles`` (N. O'Boyle), a validating
parser for partial SMILES, on prefixes of real MOSES molecules and of mutated ones.

Where the two must differ, by design:

- partialsmiles flags valences it calls uncommon, and partial aromatic systems that cannot
  kekulize; the mask uses a generous valence table (it must never forbid a molecule RDKit
  accepts) and cannot decide aromaticity from a prefix. So the mask may accept a prefix that
  partialsmiles rejects with ``ValenceError`` or ``KekulizationFailure``, never one it rejects
  with ``SMILESSyntaxError``.
- The mask looks ahead: it forbids dead ends (a ring left open where no atom on the path has a
  bond left to close it, an atom that cannot take the bond) which partialsmiles only reports
  once the string ends. A prefix the mask rejects and partialsmiles accepts must therefore have
  no short completion that RDKit accepts as a molecule.
- partialsmiles's style rule 4 ("the final branch should not be within parentheses": ``C(N))``)
  is ignored: RDKit and the SMILES specification accept such strings.
"""

import importlib.util
import random

import numpy as np
import pytest
import tensorflow as tf

from seqvae.data.tokenizers import SmilesTokenizer
from seqvae.data.vocabulary import Vocabulary
from seqvae.model.grammar import SmilesGrammar

ps = pytest.importorskip("partialsmiles", reason="the oracle is the partialsmiles package")
if importlib.util.find_spec("moses") is None:  # the data only: importing moses needs torch
    pytest.skip("needs the molsets data", allow_module_level=True)

STYLE_RULE_FINAL_BRANCH = 4  # partialsmiles rulesToIgnore bit
TOKENIZER = SmilesTokenizer()


def _oracle(text: str, partial: bool = True) -> str:
    """'' when partialsmiles accepts ``text`` (as a prefix if ``partial``), else the error type."""
    try:
        ps.ParseSmiles(text, partial=partial, rulesToIgnore=STYLE_RULE_FINAL_BRANCH)
    except ps.Error as error:
        return type(error).__name__
    return ""


def _mask_accepts(grammar, vocab, prefixes):
    """Whether every token of each prefix is allowed (no length limit in play)."""
    longest = max(map(len, prefixes))
    ids = np.zeros((len(prefixes), longest), np.int32)
    for row, tokens in enumerate(prefixes):
        ids[row, :len(tokens)] = vocab.encode(tokens, add_eos=False)
    masks = tf.function(grammar.teacher_forced_masks)(tf.constant(ids), 10 * longest, False)
    ok = np.take_along_axis(masks.numpy(), ids[:, :, None], axis=2)[:, :, 0]
    return [bool(ok[row, :len(tokens)].all()) for row, tokens in enumerate(prefixes)]


def _completes(text, tokens, depth):
    """Whether appending at most ``depth`` tokens gives a molecule RDKit accepts (the judge of
    validity everywhere in seqvae; partialsmiles prunes), hypervalent F/Cl/Br excepted: RDKit
    accepts ``O=BrO``, the mask holds halogens to one bond on purpose (no MOSES molecule has
    more, and a model should not be steered into them)."""
    from rdkit import Chem, rdBase

    with rdBase.BlockLogs():
        mol = Chem.MolFromSmiles(text)
    if mol is not None and all(atom.GetTotalValence() <= 1 for atom in mol.GetAtoms()
                               if atom.GetSymbol() in ("F", "Cl", "Br")):
        return True
    if depth == 0 or _oracle(text) != "":
        return False
    return any(_completes(text + token, tokens, depth - 1) for token in tokens)


@pytest.mark.parametrize("kekulize", [True, False])
def test_the_mask_agrees_with_partialsmiles(kekulize):
    from seqvae.data.chemistry import kekule_smiles
    from seqvae.data.sources import read_sequences

    texts = read_sequences("moses:train", limit=400).texts[::4]
    if kekulize:
        texts = [kekule_smiles(text) for text in texts]
    tokenized = [TOKENIZER.tokenize(text) for text in texts]
    vocab = Vocabulary.fit(tokenized)
    grammar = SmilesGrammar.from_tokens(vocab.tokens)
    atoms_and_marks = [t for t in vocab.tokens if not t.startswith("<")]
    rng = random.Random(0)
    real = [tokens[:end] for tokens in tokenized for end in range(1, len(tokens) + 1)]
    mutated = [tokens[:cut] + [rng.choice(atoms_and_marks)]
               for tokens in tokenized for cut in rng.sample(range(len(tokens)), 8)]

    # Every prefix of a real molecule: both accept.
    assert all(_mask_accepts(grammar, vocab, real))
    assert [p for p in real if _oracle("".join(p)) not in ("", "KekulizationFailure")] == []

    ours = _mask_accepts(grammar, vocab, mutated)
    theirs = [_oracle("".join(p)) for p in mutated]
    agree = sum((o and t == "") or (not o and t != "") for o, t in zip(ours, theirs))
    # Syntax: every prefix partialsmiles rejects as a syntax error, the mask rejects too.
    accepted_by_mask_only = {t for o, t in zip(ours, theirs) if o and t}
    assert accepted_by_mask_only <= {"ValenceError", "KekulizationFailure"}
    # Look-ahead: what only the mask rejects has no completion of up to two tokens.
    rejected_by_mask_only = ["".join(p) for p, o, t in zip(mutated, ours, theirs) if not o and not t]
    assert [text for text in rejected_by_mask_only
            if _completes(text, atoms_and_marks, 2)] == []
    # The oracle is not vacuous: the mutations break most prefixes, and both see it.
    assert sum(t != "" for t in theirs) > len(mutated) / 5
    assert agree > 0.85 * len(mutated)
    print(f"kekulize={kekulize}: {len(real)} real prefixes accepted by both; {len(mutated)} "
          f"mutated: agree {agree}, mask only accepts {sum(o and bool(t) for o, t in zip(ours, theirs))}"
          f" ({sorted(accepted_by_mask_only)}), mask only rejects {len(rejected_by_mask_only)}")
