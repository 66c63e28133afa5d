"""seqvae's MOSES metrics against values computed by MOSES 0.3.1's own code.

The reference values are in ``fixtures/moses_reference.json``, computed once by
``bench/moses_peer/make_reference.py`` with MOSES (molsets 0.3.1, fcd_torch) on the old stack it
needs (numpy<2, pandas<2, torch: ``bench/moses_peer/setup.sh``), which CI does not have. The
fixture holds the exact inputs, so these tests need only what seqvae needs (RDKit, numpy, the
molsets data for the filter lists); only the FCD cases need the optional ``fcd`` extra.

Each value is its own case, so a failure names the metric. Tolerance: 1e-6 absolute.

Where seqvae differs from MOSES on purpose (the docstring of ``seqvae.evaluation.moses_metrics``):
nan where MOSES divides by zero, which these inputs never reach (every set has valid molecules), and
computing each metric once per distinct molecule weighted by its count, which must give MOSES's
value: the generated list here has repeated strings and non-canonical rewritings of the same
molecules, so the weighting is exercised. get_all_metrics's property Wasserstein distances (logP,
SA, QED, weight against test) are compared like every other value, and the per-molecule properties
they are built on as well.
"""

import json
import math
import os
import warnings

import pytest

from seqvae.data import chemistry
from seqvae.evaluation import chemnet, metrics, moses_metrics

FIXTURE_PATH = os.path.join(os.path.dirname(__file__), "fixtures", "moses_reference.json")
with open(FIXTURE_PATH) as _file:
    REFERENCE = json.load(_file)
INPUTS = REFERENCE["inputs"]
GEN, TEST, TEST_SF, TRAIN = INPUTS["gen"], INPUTS["test"], INPUTS["test_scaffolds"], INPUTS["train"]
K = REFERENCE["settings"]["k"]
SUITE = REFERENCE["get_all_metrics"]  # MOSES get_all_metrics(gen, k=K, test=..., ...)
FUNCTIONS = REFERENCE["functions"]  # MOSES metric functions called on their own
PROPERTIES = REFERENCE["properties"]  # {smiles: {"logP", "SA", "QED", "weight"}} by moses.metrics
TOLERANCE = 1e-6


def _fcd_available() -> str | None:
    """None if seqvae can compute FCD here, else why not."""
    if not REFERENCE["fcd"]["computed"]:
        return "the fixture has no FCD values (see its 'fcd' entry)"
    try:
        chemnet.import_fcd()
    except chemnet.MissingExtraError as error:
        return f"seqvae's FCD needs the optional fcd extra (fcd and torch): {error}"
    return None


FCD_MISSING = _fcd_available()


def _skip_fcd(name: str) -> None:
    if name.startswith("FCD/") and FCD_MISSING:
        pytest.skip(FCD_MISSING)


def _assert_agrees(ours, theirs, what: str) -> None:
    assert theirs is not None, f"{what}: the fixture has no value"
    assert ours is not None and not math.isnan(ours), f"{what}: seqvae gave {ours}, MOSES {theirs}"
    assert abs(ours - theirs) <= TOLERANCE, (
        f"{what}: seqvae {ours!r}, MOSES {theirs!r} (difference {ours - theirs:.3g})"
    )


def _references() -> dict:
    return {"Test": TEST, "TestSF": TEST_SF}


# --- the inputs every metric starts from --------------------------------------------------------


def test_fixture_is_what_the_tests_expect():
    assert len(GEN) > 150 and len(TEST) >= 100 and len(TEST_SF) >= 100 and len(TRAIN) >= 1000
    expected = {"valid", "IntDiv", "IntDiv2", "Filters", "Novelty", "logP", "SA", "QED", "weight"}
    expected |= {f"unique@{k}" for k in K}
    for name in ("Test", "TestSF"):
        expected |= {f"{metric}/{name}" for metric in ("FCD", "SNN", "Frag", "Scaf")}
    assert set(SUITE) == expected


def test_remove_invalid_gives_mosess_canonical_smiles():
    # MOSES's remove_invalid(gen, canonize=True) is what every metric after "valid" is computed on;
    # a difference here (e.g. a newer RDKit writing another canonical SMILES) shows up in many
    # metrics below, so it is checked first, on its own.
    ours = chemistry.remove_invalid(GEN, canonize=True)
    theirs = REFERENCE["valid_canonical"]
    differing = [(a, b) for a, b in zip(ours, theirs) if a != b]
    assert len(ours) == len(theirs) and not differing, differing[:10]


# --- seqvae's suite against MOSES's get_all_metrics ---------------------------------------------


@pytest.fixture(scope="module")
def suite():
    """seqvae's moses_metrics on the fixture's inputs, computed once (with FCD where possible)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return moses_metrics.moses_metrics(
            GEN, TRAIN, TEST, TEST_SF, include_fcd=FCD_MISSING is None, k=K
        )


@pytest.mark.parametrize("name", sorted(SUITE))
def test_suite_agrees_with_get_all_metrics(suite, name):
    _skip_fcd(name)
    _assert_agrees(suite[name], SUITE[name], f"moses_metrics()[{name!r}]")


# --- seqvae's metric functions on their own -----------------------------------------------------
# Each is called on the raw generated list (invalid entries, repeats and non-canonical rewritings
# included) or on its valid molecules, as its docstring says, and compared with MOSES's value.


def _valid() -> list[str]:
    return chemistry.remove_invalid(GEN, canonize=True)


def _unique_at(k):
    def compute():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # k=1000: fewer valid molecules, all used (as MOSES)
            return metrics.fraction_unique(_valid(), k=k)

    return compute


FUNCTION_CASES = {
    # name: (seqvae's computation, MOSES's value)
    "fraction_valid(gen)": (
        lambda: metrics.fraction_valid(GEN), FUNCTIONS["fraction_valid(gen)"]
    ),
    "fraction_unique(valid)": (
        lambda: metrics.fraction_unique(_valid()), FUNCTIONS["fraction_unique(valid)"]
    ),
    **{f"fraction_unique(valid, k={k})": (_unique_at(k), SUITE[f"unique@{k}"]) for k in K},
    "novelty(gen, train)": (
        lambda: metrics.novelty(GEN, TRAIN), FUNCTIONS["novelty(gen, train)"]
    ),
    "internal_diversity(gen)": (lambda: metrics.internal_diversity(GEN), SUITE["IntDiv"]),
    "internal_diversity(gen, p=2)": (
        lambda: metrics.internal_diversity(GEN, p=2), SUITE["IntDiv2"]
    ),
    # MOSES's standalone fraction_passes_filters counts invalid entries as failing; its
    # get_all_metrics passes it only the valid molecules. seqvae's function does the same.
    "fraction_passes_filters(gen)": (
        lambda: metrics.fraction_passes_filters(GEN),
        FUNCTIONS["fraction_passes_filters(gen)"],
    ),
    "fraction_passes_filters(valid)": (
        lambda: metrics.fraction_passes_filters(_valid()), SUITE["Filters"]
    ),
}
for _name, _ref in _references().items():
    FUNCTION_CASES.update({
        f"snn(gen, {_name})": (lambda ref=_ref: metrics.snn(GEN, ref), SUITE[f"SNN/{_name}"]),
        f"frag_similarity(gen, {_name})": (
            lambda ref=_ref: metrics.frag_similarity(GEN, ref), SUITE[f"Frag/{_name}"]
        ),
        f"scaffold_similarity(gen, {_name})": (
            lambda ref=_ref: metrics.scaffold_similarity(GEN, ref), SUITE[f"Scaf/{_name}"]
        ),
        f"fcd(gen, {_name})": (lambda ref=_ref: metrics.fcd(GEN, ref), SUITE[f"FCD/{_name}"]),
    })
for _prop in ("logP", "SA", "QED", "weight"):  # MOSES: W1 of the valid gen against test
    FUNCTION_CASES[f"property_distance(gen, Test, {_prop!r})"] = (
        lambda prop=_prop: metrics.property_distance(GEN, TEST, prop), SUITE[_prop]
    )
# FCD without the multi-fragment molecules (SMILES with "."): MOSES's fcd_torch ends the one-hot
# encoding of a SMILES at its first "." (its end token), so ChemNet sees only the first fragment;
# the fcd package (1.2.2) that seqvae calls encodes the whole string. gen has one such molecule,
# CC(=O)[O-].[Na+]: with fcd 1.2.2 the FCD cases above differ from MOSES by -3.5e-4 (Test) and
# +2.7e-3 (TestSF) for that reason alone. These cases check everything else in FCD.
_SPLIT_NAMES = {"Test": "test", "TestSF": "test_scaffolds"}
for _name, _ref in _references().items():
    _key = f"FCD(valid single-fragment, {_SPLIT_NAMES[_name]})"
    FUNCTION_CASES[f"fcd(single-fragment gen, {_name})"] = (
        lambda ref=_ref: metrics.fcd([s for s in _valid() if "." not in s], ref),
        FUNCTIONS[_key],
    )


@pytest.mark.parametrize("name", list(FUNCTION_CASES))
def test_function_agrees_with_moses(name):
    _skip_fcd("FCD/" if name.startswith("fcd(") else name)
    compute, theirs = FUNCTION_CASES[name]
    _assert_agrees(compute(), theirs, name)


# --- per-molecule properties --------------------------------------------------------------------

PROPERTY_FUNCTIONS = {
    # MOSES name: seqvae function (MOSES: moses.metrics.utils.logP, SA, QED, weight)
    "logP": chemistry.logp,
    "SA": chemistry.sa_score,  # seqvae: RDKit Contrib's sascorer; MOSES ships its own copy
    "QED": chemistry.qed,
    "weight": chemistry.molecular_weight,
}


@pytest.mark.parametrize("prop", list(PROPERTY_FUNCTIONS))
def test_property_agrees_with_moses(prop):
    function = PROPERTY_FUNCTIONS[prop]
    differing = []
    for smiles, values in PROPERTIES.items():
        ours, theirs = function(smiles), values[prop]
        if not abs(ours - theirs) <= TOLERANCE:
            differing.append(f"{smiles}: seqvae {ours!r}, MOSES {theirs!r}")
    assert len(PROPERTIES) >= 20
    assert not differing, f"{prop} differs on {len(differing)} of {len(PROPERTIES)}: " + "; ".join(
        differing
    )
