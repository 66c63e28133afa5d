"""seqvae.conditional.search: ``sample_where`` and ``seqvae sample --where/--scaffold`` on a
tiny run; every molecule returned is checked again here with RDKit."""

import contextlib
import io

import numpy as np
import pytest
from conftest import HELD_OUT, SMILES
from rdkit import Chem
from rdkit.Chem import Crippen, Descriptors

from seqvae.cli import main
from seqvae.conditional import sample_where
from seqvae.conditional.search import Found
from seqvae.errors import SeqvaeError
from seqvae.property_fit import property_table

WHERE = ["mw<=90", "logp=0.5±1"]


@pytest.fixture(scope="module")
def run_with_references(run, tmp_path_factory):
    """The tiny run with the RDKit values of its molecules cached, as a head's fit leaves them."""
    path = tmp_path_factory.mktemp("references") / "molecules.smi"
    path.write_text("".join(f"{m}\n" for m in dict.fromkeys(SMILES + HELD_OUT)))
    property_table(run, str(path), ["logp", "qed", "mw"])
    return run


def recheck(smiles, where=(), scaffold=None):
    """RDKit's own verdict on one returned molecule, computed here from scratch."""
    mol = Chem.MolFromSmiles(smiles)
    assert mol is not None, smiles
    assert Chem.MolToSmiles(mol) == smiles  # canonical, as sample prints them
    values = {"mw": Descriptors.MolWt(mol), "logp": Crippen.MolLogP(mol)}
    for condition in where:
        name, rest = condition.split("<=") if "<=" in condition else condition.split("=")
        if "±" in rest:
            centre, tolerance = map(float, rest.split("±"))
            assert centre - tolerance <= values[name] <= centre + tolerance, (smiles, condition)
        else:
            assert values[name] <= float(rest), (smiles, condition)
    if scaffold is not None:
        assert mol.HasSubstructMatch(Chem.MolFromSmiles(scaffold)), (smiles, scaffold)


def test_every_molecule_returned_meets_every_condition(run_with_references):
    found = sample_where(run_with_references, 12, WHERE, seed=0, max_draws=6000)
    assert len(found.molecules) == 12, found.summary()
    assert len(set(found.molecules)) == 12 and not found.stopped
    for smiles, values in zip(found.molecules, found.values):
        recheck(smiles, WHERE)
        assert values[0] == pytest.approx(Descriptors.MolWt(Chem.MolFromSmiles(smiles)))
    references = set(SMILES + HELD_OUT)
    assert not references & set(found.molecules)  # novel: the steering molecules left out
    assert found.draws >= 12 and 0 < found.hit_rate <= 1 and found.hits >= 12
    assert "z near" in found.steering and "first-draw hit rate" in found.summary()
    assert 0 < found.setup_seconds < found.seconds and "s of it setting up" in found.summary()
    assert found.search_rate == pytest.approx(
        found.distinct / (found.seconds - found.setup_seconds)) and found.distinct >= 12
    again = sample_where(run_with_references, 12, WHERE, seed=0, max_draws=6000)
    assert again.molecules == found.molecules  # the same for a seed


def test_a_scaffold_is_written_first_and_rechecked(run_with_references):
    found = sample_where(run_with_references, 10, (), "c1ccccc1", seed=1, max_draws=4000)
    assert len(found.molecules) == 10, found.summary()
    for smiles in found.molecules:
        recheck(smiles, scaffold="c1ccccc1")
    assert "writes the scaffold first" in found.steering and found.values.shape == (10, 0)
    both = sample_where(run_with_references, 4, ["mw<=200"], "c1ccccc1", seed=1, max_draws=4000)
    for smiles in both.molecules:
        recheck(smiles, ["mw<=200"], "c1ccccc1")


def test_a_smarts_pattern_steers_z_near_molecules_holding_it(run_with_references):
    found = sample_where(run_with_references, 3, (), "[#6]~[#8]", seed=0, max_draws=3000)
    pattern = Chem.MolFromSmarts("[#6]~[#8]")
    assert all(Chem.MolFromSmiles(s).HasSubstructMatch(pattern) for s in found.molecules)
    assert "holding the substructure" in found.steering


def test_budgets_stop_the_search_and_say_why(run_with_references):
    found = sample_where(run_with_references, 500, ["mw<=50"], seed=0, max_draws=300)
    assert found.draws == 300 and len(found.molecules) < 500
    assert found.stopped == "the budget of 300 draws is spent"
    assert found.summary().startswith(f"found {len(found.molecules)} of 500 molecules (the budget")
    timed = sample_where(run_with_references, 500, ["mw<=50"], seed=0, time_budget=0.0)
    assert timed.draws == 0 and "time budget of 0 s" in timed.stopped


def test_sample_and_filter_is_the_same_check_on_the_runs_own_sampler(run_with_references):
    found = sample_where(run_with_references, 5, ["mw<=90"], seed=0, max_draws=3000, steer=False)
    for smiles in found.molecules:
        recheck(smiles, ["mw<=90"])
    assert found.steering.startswith("sample-and-filter")


def test_a_column_needs_a_head_that_predicts_it(run_with_references):
    with pytest.raises(SeqvaeError, match="has no property head"):
        sample_where(run_with_references, 3, ["col:pIC50>5"])

    class Head:  # a stand-in head that predicts col:size as the encoding's first coordinate
        names = ("col:size",)

        def index(self, name):
            return self.names.index(name)

        def predict(self, z):
            return np.asarray(z)[:, :1] * 0 + 7.0

    with pytest.raises(SeqvaeError, match="col:size: no molecules with known values"):
        sample_where(run_with_references, 3, ["col:size>5"], head=Head())
    with pytest.raises(SeqvaeError, match="give a condition"):
        sample_where(run_with_references, 3)


def test_found_writes_a_csv_of_checked_values():
    found = Found(["CCO"], ("mw", "logp"), np.array([[46.07, -0.0014]]), 1, 10, 2, 1.0, "", "",
                  "mw < 50", distinct=1)
    assert found.csv() == "smiles,mw,logp\nCCO,46.07,-0.0014\n"
    assert found.new_rate == 0.1 and found.hit_rate == 0.2


def cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def test_the_command_prints_checked_molecules_and_a_summary(run_with_references, tmp_path):
    code, out, err = cli(["sample", run_with_references.run_dir, "-n", "6", "--where",
                          "mw<=90", "--where", "logp=0.5+-1", "--max-draws", "6000"])
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 6
    for smiles in lines:
        recheck(smiles, WHERE)
    assert err.startswith("seqvae sample: 6 molecules with mw <= 90 and -0.5 <= logp <= 1.5, "
                          "each checked (RDKit)")
    table = tmp_path / "found.csv"
    code, _, err = cli(["sample", run_with_references.run_dir, "-n", "3", "--scaffold",
                        "c1ccccc1", "--where", "mw<=200", "--out", table, "--max-draws", "4000"])
    assert code == 0, err
    rows = table.read_text().splitlines()
    assert rows[0] == "smiles,mw" and len(rows) == 4
    code, _, err = cli(["sample", run_with_references.run_dir, "--max-draws", "10"])
    assert code == 2 and "use them with --where or --scaffold" in err
    for bad, fragment in [(["--where", "foo>1"], "unknown property 'foo'"),
                          (["--where", "logp=3"], "never exactly one number"),
                          (["--scaffold", "C1CC("], "neither a SMILES nor a SMARTS"),
                          (["--scaffold", "c1ccc(P)cc1"], "this run cannot write it"),
                          (["--where", "col:pIC50>5"], "has no property head")]:
        code, out, err = cli(["sample", run_with_references.run_dir, "-n", "3"] + bad)
        lines = err.strip().splitlines()
        assert code == 2 and not out and len(lines) == 1 and fragment in lines[0], err
