"""seqvae.conditional.conditions: parsing ``--where`` conditions and checking molecules by RDKit."""

import math

import numpy as np
import pytest
from rdkit import Chem
from rdkit.Chem import Crippen, Descriptors, QED

from seqvae.conditional.conditions import (Checker, Condition, describe, parse_condition,
                                           parse_conditions)
from seqvae.conditional.scaffolds import parse_scaffold
from seqvae.errors import SeqvaeError


@pytest.mark.parametrize("text, low, high, strict_low, strict_high", [
    ("logp=2.5±0.5", 2.0, 3.0, False, False),
    ("logp = 2.5 +- 0.5", 2.0, 3.0, False, False),
    ("logp=2.5+/-0.5", 2.0, 3.0, False, False),
    ("logp=2..3", 2.0, 3.0, False, False),
    ("logp=-1.5..-0.5", -1.5, -0.5, False, False),
    ("qed>=0.7", 0.7, math.inf, False, False),
    ("qed≥0.7", 0.7, math.inf, False, False),
    ("qed>0.7", 0.7, math.inf, True, False),
    ("sa<=3.5", -math.inf, 3.5, False, False),
    ("mw<400", -math.inf, 400.0, False, True),
    ("mw≤4e2", -math.inf, 400.0, False, False),
    ("col:logS>=-3", -3.0, math.inf, False, False),
])
def test_every_written_form_parses(text, low, high, strict_low, strict_high):
    condition = parse_condition(text)
    assert (condition.low, condition.high) == pytest.approx((low, high))
    assert (condition.strict_low, condition.strict_high) == (strict_low, strict_high)
    assert condition.text == text.strip()


@pytest.mark.parametrize("text, fragment", [
    ("foo>1", "unknown property 'foo'"),
    ("logp=3", "never exactly one number"),
    ("logp=3..2", "empty interval"),
    ("logp=3±0", "tolerance must be > 0"),
    ("logp>=", "not a condition"),
    ("logp between 2 and 3", "not a condition"),
    ("col:>3", "not a condition"),
])
def test_bad_conditions_are_one_line_errors(text, fragment):
    with pytest.raises(SeqvaeError, match=fragment) as error:
        parse_condition(text)
    assert "\n" not in str(error.value)


def test_several_conditions_in_one_text_and_in_words():
    conditions = parse_conditions(["logp=2..3, qed>=0.7 and sa<4", "mw<400"])
    assert [c.name for c in conditions] == ["logp", "qed", "sa", "mw"]
    assert describe(conditions) == "2 <= logp <= 3 and qed >= 0.7 and sa < 4 and mw < 400"


def test_holds_and_distance():
    condition = Condition("logp", 1.0, 2.0, strict_high=True)
    values = np.array([0.5, 1.0, 1.5, 2.0, 3.0, np.nan])
    assert condition.holds(values).tolist() == [False, True, True, False, False, False]
    assert condition.distance(values).tolist() == [0.5, 0.0, 0.0, 0.0, 1.0, math.inf]
    assert condition.measured and not Condition("col:x").measured


def test_the_checker_computes_rdkit_values_of_the_molecule_itself():
    texts = ["CCO", "c1ccccc1O", "not a molecule", "CC(=O)Nc1ccc(O)cc1", "OC1=CC=CC=C1"]
    checker = Checker(parse_conditions(["logp>=1", "qed>=0.4"]))
    checked = checker.check(texts)
    assert checked.canonical == ["CCO", "Oc1ccccc1", None, "CC(=O)Nc1ccc(O)cc1", "Oc1ccccc1"]
    for row, text in enumerate(texts):
        mol = Chem.MolFromSmiles(text)
        expected = mol is not None and Crippen.MolLogP(mol) >= 1 and QED.qed(mol) >= 0.4
        assert checked.ok[row] == expected
        if mol is not None:
            assert checked.values[row, 0] == pytest.approx(Crippen.MolLogP(mol))
    # QED is computed only where logP passed: the cheap check first
    assert np.isnan(checked.values[0, 1]) and not np.isnan(checked.values[1, 1])


def test_the_cheapest_property_is_checked_first(monkeypatch):
    from seqvae.data import properties as props

    calls = []
    real = props.rdkit_property

    def counted(name):
        function = real(name)
        return lambda mol: calls.append(name) or function(mol)

    monkeypatch.setattr(props, "rdkit_property", counted)
    checker = Checker(parse_conditions(["qed>=0", "mw<50"]))
    checked = checker.check(["CCO", "c1ccccc1CCCCCC"])
    assert calls == ["mw", "mw", "qed"]  # the heavy molecule fails mw before its QED is computed
    assert checked.ok.tolist() == [True, False]
    assert checked.values[0, 1] == pytest.approx(Descriptors.MolWt(Chem.MolFromSmiles("CCO")))


def test_a_substructure_and_a_column_predicted_by_a_stub():
    scaffold = parse_scaffold("c1ccncc1")
    with pytest.raises(SeqvaeError, match="needs the run's property head"):
        Checker(parse_conditions("col:y>1"), scaffold)
    asked = []

    def predict(texts):
        asked.extend(texts)
        return np.array([[float(len(t))] for t in texts])

    checker = Checker(parse_conditions("col:y>10"), scaffold, predict)
    checked = checker.check(["c1ccncc1", "CCCCCc1ccncc1", "CCCCCCCCCCCCCc1ccccc1"])
    assert checked.ok.tolist() == [False, True, False]
    assert asked == ["c1ccncc1", "CCCCCc1ccncc1"]  # only molecules holding the scaffold
