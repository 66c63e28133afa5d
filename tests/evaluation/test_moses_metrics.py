"""Tests for seqvae.metrics: each metric against values worked out by hand on a few molecules.

Morgan fingerprints (radius 2, 1024 bits) used throughout:
  CCO (ethanol) has 6 features: 3 atom invariants (CH3, CH2, OH), 3 radius-1 environments
  (CH3-C, C(C)O, O-C); the radius-2 environments repeat the whole-molecule bond set and are
  dropped. CCN (ethylamine) likewise has 6. They share the CH3 and CH2 invariants and the CH3-CH2
  environment: 3 bits, so T(CCO, CCN) = 3 / (6 + 6 - 3) = 1/3.
"""

import importlib.metadata
import importlib.util
import math
import sys
import types
import warnings

import numpy as np
import pytest

from seqvae import parallel
from seqvae.data import chemistry, moses
from seqvae.errors import SeqvaeError
from seqvae.evaluation import chemnet, metrics, molecules, moses_files, moses_metrics, references

T_CCO_CCN = 1 / 3


def _molsets_installed() -> bool:
    try:
        moses.moses_package_dir()
    except SeqvaeError:
        return False
    return True


needs_molsets = pytest.mark.skipif(not _molsets_installed(), reason="molsets not installed")


# --- molecules ----------------------------------------------------------------------------------


# --- metrics on a handful of molecules ----------------------------------------------------------


def test_fraction_valid():
    assert metrics.fraction_valid(["CCO", "C1CC", "c1ccccc1"]) == pytest.approx(2 / 3)
    assert metrics.fraction_valid(["", "CCO"]) == 0.5
    assert math.isnan(metrics.fraction_valid([]))


def test_fraction_unique():
    # OCC is CCO, C1=CC=CC=C1 is benzene: 2 distinct of 4
    gen = ["CCO", "OCC", "c1ccccc1", "C1=CC=CC=C1"]
    assert metrics.fraction_unique(gen) == 0.5
    assert metrics.fraction_unique(gen, k=2) == 0.5  # CCO, OCC
    assert metrics.fraction_unique(gen, k=3) == pytest.approx(2 / 3)
    with pytest.warns(UserWarning, match="unique@10"):
        assert metrics.fraction_unique(gen, k=10) == 0.5
    with pytest.raises(SeqvaeError, match="invalid"):
        metrics.fraction_unique(["CCO", "xx"])
    # MOSES counts the invalid entries as one more "unique" value when not checking
    unchecked = metrics.fraction_unique(["CCO", "xx", "yy"], check_validity=False)
    assert unchecked == pytest.approx(2 / 3)


def test_novelty():
    # distinct valid canonical: {CCO, c1ccccc1}; only benzene is missing from train
    assert metrics.novelty(["CCO", "OCC", "c1ccccc1", "xx"], ["CCO"]) == 0.5
    assert metrics.novelty(["CCO"], {"CCO"}) == 0.0
    assert math.isnan(metrics.novelty(["xx"], ["CCO"]))


def test_internal_diversity_two_molecules():
    # pairs (self-pairs included): T = [[1, 1/3], [1/3, 1]]
    # IntDiv  = 1 - mean(1, 1/3, 1/3, 1) = 1 - 2/3 = 1/3
    # IntDiv2 = 1 - mean_x sqrt(mean_y T^2) = 1 - sqrt((1 + 1/9) / 2) = 1 - sqrt(5)/3
    assert metrics.internal_diversity(["CCO", "CCN"]) == pytest.approx(1 / 3, abs=1e-6)
    assert metrics.internal_diversity(["CCO", "CCN"], p=2) == pytest.approx(
        1 - math.sqrt(5) / 3, abs=1e-6
    )


def test_internal_diversity_counts_duplicates_and_skips_invalid():
    # rows of T over [CCO, CCO, CCN]: CCO -> (1 + 1 + 1/3)/3 = 7/9 (twice), CCN -> 5/9
    # IntDiv = 1 - (7/9 + 7/9 + 5/9)/3 = 1 - 19/27 = 8/27
    gen = ["CCO", "OCC", "xx", "CCN"]
    assert metrics.internal_diversity(gen) == pytest.approx(8 / 27, abs=1e-6)
    assert metrics.internal_diversity(["CCO"]) == 0.0
    assert math.isnan(metrics.internal_diversity(["xx"]))


def test_snn():
    # CCO's nearest in {CCO} is itself (1), CCN's is CCO (1/3): (1 + 1/3)/2
    assert metrics.snn(["CCO", "CCN", "xx"], ["CCO"]) == pytest.approx(2 / 3, abs=1e-6)
    assert metrics.snn(["CCO", "CCN"], ["CCN", "OCC"]) == pytest.approx(1.0)
    assert metrics.snn(["CCN"], ["CCO"]) == pytest.approx(T_CCO_CCN, abs=1e-6)
    assert math.isnan(metrics.snn(["xx"], ["CCO"]))


def test_frag_similarity():
    # no BRICS bond in benzene, ethanol or ethylamine: each molecule is its own fragment
    # gen {c1ccccc1: 1, CCO: 1}, ref {c1ccccc1: 2, CCN: 1}: cos = 2 / (sqrt(2) sqrt(5))
    gen, ref = ["c1ccccc1", "CCO"], ["c1ccccc1", "C1=CC=CC=C1", "CCN"]
    assert metrics.frag_similarity(gen, ref) == pytest.approx(2 / math.sqrt(10))
    # ethyl benzoate cuts into [1*]C([6*])=O, [16*]c1ccccc1, [3*]O[3*], [4*]CC
    # gen: those 4 once each; ref: the same 4 plus CCO: cos = 4 / (2 sqrt(5))
    assert molecules.fragments(chemistry.to_mol("CCOC(=O)c1ccccc1")) == [
        "[1*]C([6*])=O", "[16*]c1ccccc1", "[3*]O[3*]", "[4*]CC"
    ]
    ester = ["CCOC(=O)c1ccccc1"]
    assert metrics.frag_similarity(ester, ester + ["CCO"]) == pytest.approx(2 / math.sqrt(5))
    assert metrics.frag_similarity(["c1ccccc1"], ["CCO"]) == 0.0
    assert math.isnan(metrics.frag_similarity(["xx"], ["CCO"]))


def test_scaffold_similarity():
    # gen scaffolds: diphenylmethane (from its methyl derivative) and naphthalene; benzene has one
    # ring and is not counted. ref: diphenylmethane twice; ethanol has none.
    # gen {dpm: 1, naph: 1}, ref {dpm: 2}: cos = 2 / (sqrt(2) * 2) = 1/sqrt(2)
    gen = ["Cc1ccc(Cc2ccccc2)cc1", "c1ccccc1", "c1ccc2ccccc2c1"]
    ref = ["c1ccc(Cc2ccccc2)cc1", "CCc1ccc(Cc2ccccc2)cc1", "CCO"]
    assert metrics.scaffold_similarity(gen, ref) == pytest.approx(1 / math.sqrt(2))
    assert math.isnan(metrics.scaffold_similarity(["c1ccccc1", "CCO"], ref))


@needs_molsets
@pytest.mark.parametrize(
    "smiles, passes",
    [
        ("c1ccccc1", True),
        ("CCO", True),
        ("S=C1SC(=Cc2ccccc2)C(=O)N1", False),  # PAINS ene_rhod (benzylidene rhodanine)
        ("O=C1C=CC(=O)C=C1", False),  # PAINS/MCF quinone
        ("C=CC#N", False),  # MCF1: acrylonitrile Michael acceptor
        ("CCCl", False),  # MCF4: primary alkyl halide
        ("C[N+](C)(C)C", False),  # charged
        ("CP(C)C", False),  # P is not an allowed atom
        ("C1CCCCCCC1", False),  # 8-membered ring
        ("xx", False),  # invalid
    ],
)
def test_passes_filters(smiles, passes):
    assert molecules.passes_filters(smiles) is passes


@needs_molsets
def test_fraction_passes_filters():
    gen = ["c1ccccc1", "S=C1SC(=Cc2ccccc2)C(=O)N1", "xx", "OCC"]
    assert metrics.fraction_passes_filters(gen) == 0.5  # invalid entries count as failing
    assert math.isnan(metrics.fraction_passes_filters([]))


# --- property distances -------------------------------------------------------------------------


def test_wasserstein_1_by_hand():
    # U = {0, 1}, V = {1, 2}: F_U - F_V is 1/2 on [0, 1) and 1/2 on [1, 2): W1 = 1
    assert metrics.wasserstein_1([0, 1], [1, 2]) == pytest.approx(1.0)
    # U = {0}, V = {0, 0, 3}: |F_U - F_V| = 1/3 on [0, 3): W1 = 1
    assert metrics.wasserstein_1([0], [0, 0, 3]) == pytest.approx(1.0)
    # a shift moves every unit of mass by the shift
    assert metrics.wasserstein_1([1, 5, 7], [3, 7, 9]) == pytest.approx(2.0)
    # weights are counts: {0 x2, 4 x1} against {1}
    weighted = metrics.wasserstein_1([0, 4], [1], u_weights=[2, 1])
    assert weighted == pytest.approx(metrics.wasserstein_1([0, 0, 4], [1]))
    assert weighted == pytest.approx(2 / 3 * 1 + 1 / 3 * 3)
    assert metrics.wasserstein_1([2, 0], [0, 2]) == 0.0
    assert math.isnan(metrics.wasserstein_1([], [1.0]))


def test_wasserstein_1_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    u, v = rng.normal(size=50), rng.normal(1, 2, size=70)
    weights = rng.integers(1, 5, size=50)
    assert metrics.wasserstein_1(u, v) == pytest.approx(stats.wasserstein_distance(u, v),
                                                                abs=1e-12)
    assert metrics.wasserstein_1(u, v, weights) == pytest.approx(
        stats.wasserstein_distance(u, v, weights), abs=1e-12)


def test_property_distance_by_hand():
    # gen valid: CCO twice, benzene once (xx skipped); ref: CCO, benzene.
    # F_gen - F_ref = 2/3 - 1/2 between the two values: W1 = |p(benzene) - p(CCO)| / 6
    gen, ref = ["CCO", "OCC", "c1ccccc1", "xx"], ["CCO", "c1ccccc1"]
    functions = {"logP": chemistry.logp, "SA": chemistry.sa_score, "QED": chemistry.qed,
                 "weight": chemistry.molecular_weight}
    for name, function in functions.items():
        expected = abs(function("c1ccccc1") - function("CCO")) / 6
        assert metrics.property_distance(gen, ref, name) == pytest.approx(expected, abs=1e-12)
    assert metrics.property_distance(ref, ref, "weight") == 0.0
    assert math.isnan(metrics.property_distance(["xx"], ref, "QED"))
    with pytest.raises(SeqvaeError, match="unknown property 'MW'"):
        metrics.property_distance(gen, ref, "MW")


def test_suite_notes_a_test_reference_without_properties():
    notes = []
    test = references.reference_stats(["CCO", "CCN"])
    result = moses_metrics.moses_metrics(["CCO"], ["CCO"], test, ["CCN"], include_fcd=False,
                                         k=(1,), notes=notes)
    assert all(result[name] is None for name in ("logP", "SA", "QED", "weight"))
    assert any(note.startswith("logP, SA, QED, weight not computed") for note in notes)


# --- reference statistics and the suite ---------------------------------------------------------


def test_reference_stats_reused_equal_lists():
    ref = ["CCO", "c1ccccc1", "CCOC(=O)c1ccccc1", "c1ccc(Cc2ccccc2)cc1", "xx"]
    stats = references.reference_stats(ref)
    assert stats.size == 4 and stats.fingerprints.shape == (4, 128)
    gen = ["CCN", "Cc1ccc(Cc2ccccc2)cc1", "CCOC(=O)c1ccccc1"]
    for metric in (metrics.snn, metrics.frag_similarity, metrics.scaffold_similarity):
        assert metric(gen, stats) == metric(gen, ref)


def test_moses_metrics_on_tiny_sets():
    gen = ["CCO", "OCC", "CCN", "c1ccccc1", "xx"]
    test, test_sf, train = ["CCO", "c1ccccc1"], ["CCN"], ["CCO"]
    notes = []
    result = moses_metrics.moses_metrics(gen, train, test, test_sf, include_fcd=False, notes=notes)
    valid = ["CCO", "CCO", "CCN", "c1ccccc1"]
    assert result["valid"] == 0.8
    assert result["unique@1000"] == result["unique@10000"] == 0.75
    assert result["Novelty"] == pytest.approx(2 / 3)
    assert result["SNN/Test"] == pytest.approx(metrics.snn(valid, test))
    assert result["SNN/TestSF"] == pytest.approx(metrics.snn(valid, test_sf))
    assert result["Frag/Test"] == pytest.approx(metrics.frag_similarity(valid, test))
    assert math.isnan(result["Scaf/Test"])  # no molecule with two rings
    assert result["IntDiv"] == pytest.approx(metrics.internal_diversity(valid))
    assert result["IntDiv2"] == pytest.approx(metrics.internal_diversity(valid, p=2))
    if _molsets_installed():
        assert result["Filters"] == 1.0
    assert result["FCD/Test"] is None and result["FCD/TestSF"] is None
    assert notes == ["FCD not computed: include_fcd=False",
                     "unique@1000: only 4 valid molecules, all of them used",
                     "unique@10000: only 4 valid molecules, all of them used"]
    # property distances to test [CCO, benzene] from valid [CCO, CCO, CCN, benzene]
    assert result["weight"] == pytest.approx(metrics.property_distance(valid, test, "weight"))
    expected = {"valid", "unique@1000", "unique@10000", "Novelty", "IntDiv", "IntDiv2", "Filters",
                "logP", "SA", "QED", "weight"}
    for name in ("Test", "TestSF"):
        expected |= {f"FCD/{name}", f"SNN/{name}", f"Frag/{name}", f"Scaf/{name}"}
    assert set(result) == expected


def test_generated_molecules_on_every_core_give_the_serial_values(monkeypatch):
    """Many distinct generated molecules are fingerprinted, fragmented, filtered and scored in
    worker processes: the metrics are exactly those of one process."""
    gen = ["CCO", "OCC", "CCN", "c1ccccc1", "xx", "CCOC(=O)c1ccccc1", "c1ccc(Cc2ccccc2)cc1",
           "O=C(O)c1ccccc1N", "CC(C)Cc1ccc(C(C)C(=O)O)cc1", "c1ccc2ccccc2c1"] * 3
    test, test_sf, train = ["CCO", "c1ccccc1", "c1ccc2ccccc2c1N"], ["CCN", "c1ccncc1"], ["CCO"]
    serial = moses_metrics.moses_metrics(gen, train, test, test_sf, include_fcd=False)
    monkeypatch.setattr(molecules, "PARALLEL_MIN_GENERATED", 1)
    monkeypatch.setattr(parallel, "worker_count", lambda: 2)
    lines = []
    on_cores = moses_metrics.moses_metrics(gen, train, test, test_sf, include_fcd=False,
                                           progress=lines.append)
    assert any(line.startswith("validity: 30/30 molecules (2 processes, ") for line in lines)
    assert any(line.startswith("generated: 8/8 molecules (2 processes, ") for line in lines)
    assert serial.keys() == on_cores.keys()
    for name, value in serial.items():
        assert value == on_cores[name] or (value is None and on_cores[name] is None) or (
            math.isnan(value) and math.isnan(on_cores[name])), name


def test_moses_metrics_with_no_valid_molecule():
    lines = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = moses_metrics.moses_metrics(
            ["xx", "C1CC"], ["CCO"], ["CCO"], ["CCN"], include_fcd=False, progress=lines.append
        )
    assert result["valid"] == 0.0
    assert all(math.isnan(result[k]) for k in ("unique@1000", "Novelty", "IntDiv", "SNN/Test"))
    assert lines and all(isinstance(line, str) for line in lines)


# --- optional pieces: FCD, MOSES data -----------------------------------------------------------


def test_fcd_missing_extra_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "fcd", None)  # makes `import fcd` raise ImportError
    hint = r"pip install torch==2\.13\.0 fcd==1\.2\.2"
    with pytest.raises(chemnet.MissingExtraError, match=hint):
        metrics.fcd(["CCO", "CCN"], ["CCO", "CCC"])
    assert issubclass(chemnet.MissingExtraError, SeqvaeError)
    notes = []
    result = moses_metrics.moses_metrics(["CCO"], ["CCO"], ["CCO"], ["CCN"], k=(1,), notes=notes)
    assert result["FCD/Test"] is None and result["FCD/TestSF"] is None
    assert len(notes) == 1 and "seqvae[fcd]" in notes[0]


def test_fcd_plumbing_with_a_stub_chemnet(monkeypatch, tmp_path):
    monkeypatch.setenv("SEQVAE_CACHE_DIR", str(tmp_path))  # the stub's statistics stay here
    # a stand-in fcd package: "activations" are (length, number of 'C') of each SMILES, and the
    # "distance" is the squared distance of the means
    def get_predictions(model, smiles, device):
        return np.array([[len(s), s.count("C")] for s in smiles], float)

    def calculate_frechet_distance(mu1, sigma1, mu2, sigma2):
        return float((mu1 - mu2) @ (mu1 - mu2))

    stub = types.SimpleNamespace(
        load_ref_model=lambda: "chemnet",
        get_predictions=get_predictions,
        calculate_frechet_distance=calculate_frechet_distance,
    )
    monkeypatch.setitem(sys.modules, "fcd", stub)
    monkeypatch.setitem(
        sys.modules, "torch", types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=bool))
    )
    # gen: valid canonical [CCO, CCO] -> mean (3, 2); ref [c1ccccc1, CCN] -> mean (5.5, 1)
    # distance = 2.5^2 + 1^2 = 7.25
    gen, ref = ["CCO", "OCC", "xx"], ["c1ccccc1", "NCC"]
    assert metrics.fcd(gen, ref) == pytest.approx(7.25)
    assert metrics.fcd(gen, references.reference_stats(ref, include_fcd=True)) == pytest.approx(7.25)
    assert math.isnan(metrics.fcd(["CCO"], ref))  # one molecule has no covariance
    with pytest.raises(SeqvaeError, match="include_fcd=True"):
        metrics.fcd(gen, references.reference_stats(ref, cache=False))
    notes = []
    result = moses_metrics.moses_metrics(gen, ["CCO"], ref, ["CCO", "C"], k=(2,), notes=notes)
    assert result["FCD/Test"] == pytest.approx(7.25)
    assert result["FCD/TestSF"] == pytest.approx(1.25)  # ref mean (2, 1.5): 1^2 + 0.5^2
    assert notes == []


def test_fcd_of_a_set_with_itself_is_zero():
    pytest.importorskip("torch")
    pytest.importorskip("fcd")
    smiles = ["CCO", "CCN", "c1ccccc1", "CC(=O)Oc1ccccc1C(=O)O", "C1CCNCC1", "CCCl"]
    assert metrics.fcd(smiles, smiles) == pytest.approx(0.0, abs=1e-3)
    assert metrics.fcd(smiles, smiles[::-1][:3]) > 0


def test_missing_molsets_message(monkeypatch):
    def no_distribution(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    monkeypatch.setattr(importlib.metadata, "distribution", no_distribution)
    with pytest.raises(SeqvaeError, match=r"pip install --no-deps molsets==0\.3\.1"):
        moses.moses_package_dir()


@needs_molsets
def test_default_reference_takes_fcd_statistics_from_moses(monkeypatch, tmp_path):
    # seed the per-process cache so the 176k-molecule split is not processed here
    monkeypatch.setenv("SEQVAE_CACHE_DIR", str(tmp_path))
    seeded = references.reference_stats(["CCO", "CCN"])
    monkeypatch.setattr(moses_files, "_DEFAULT_REFERENCES", {"test": seeded})
    stats = moses_files.default_reference("test", True, False, progress=None)
    assert stats.fingerprints is seeded.fingerprints
    assert stats.fcd_mean.shape == (512,) and stats.fcd_covariance.shape == (512, 512)
    assert moses_files.default_reference("test", False, False, progress=None) is stats
    # MOSES's pickled file was read once, with the restricted unpickler, into a pickle-free part
    parts = list(tmp_path.glob("reference_stats/moses-*/moses_fcd.npz"))
    assert len(parts) == 1
    with np.load(parts[0], allow_pickle=False) as arrays:
        np.testing.assert_array_equal(arrays["mean"], stats.fcd_mean)
    monkeypatch.setattr(moses_files, "read_moses_stats", None)  # a second read would fail
    monkeypatch.setattr(moses_files, "_DEFAULT_REFERENCES", {"test": seeded})
    again = moses_files.default_reference("test", True, False, progress=None)
    np.testing.assert_array_equal(again.fcd_covariance, stats.fcd_covariance)


def test_moses_statistics_reader_refuses_other_classes(tmp_path):
    import zipfile

    class Payload:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "evil_stats.npz"
    array = np.empty((), object)
    array[()] = {"FCD": Payload()}
    np.savez(path, stats=array)
    assert zipfile.is_zipfile(path)
    with pytest.raises(SeqvaeError, match="refusing to unpickle builtins.print"):
        moses_files.read_moses_stats(str(path))
    safe = tmp_path / "safe_stats.npz"
    ok = np.empty((), object)
    ok[()] = {"FCD": {"mu": np.arange(3.0)}, "Frag": {"ref": __import__("collections").Counter("ab")}}
    np.savez(safe, stats=ok)
    read = moses_files.read_moses_stats(str(safe))
    np.testing.assert_array_equal(read["FCD"]["mu"], np.arange(3.0))
    assert read["Frag"]["ref"] == {"a": 1, "b": 1}


def test_a_script_without_a_main_guard_still_gets_its_metrics(tmp_path):
    """Worker processes are spawned, which re-runs a script that has no ``__main__`` guard: the
    workers fail, and the metrics are computed in the calling process, with a note."""
    import subprocess

    script = tmp_path / "unguarded.py"
    script.write_text(
        "from seqvae.evaluation import metrics, molecules, moses_metrics\n"
        "molecules.PARALLEL_MIN_GENERATED = 1\n"
        "lines = []\n"
        "print(metrics.fraction_passes_filters(['CCO', 'c1ccccc1', 'CCN'] * 2), end=' ')\n"
        "print(moses_metrics.moses_metrics(['CCO', 'CCN', 'c1ccccc1'], ['CCO'], ['CCO'], ['CCN'],\n"
        "      include_fcd=False, progress=lines.append)['valid'])\n"
        "assert any('one process instead' in line for line in lines), lines\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["1.0", "1.0"]


@needs_molsets
def test_filter_screen_keeps_every_pattern_that_matches():
    """The pattern-fingerprint screen only skips patterns a molecule cannot contain: on the
    agreement fixture's generated and test molecules (and the alerts above) every pattern that
    HasSubstructMatch finds is among the candidates, and most patterns are screened out."""
    import json
    import os

    from rdkit import Chem

    path = os.path.join(os.path.dirname(__file__), "fixtures", "moses_reference.json")
    with open(path) as file:
        inputs = json.load(file)["inputs"]
    alerts = [  # the alerts above, and demo samples that each hit other MCF/PAINS patterns
        "S=C1SC(=Cc2ccccc2)C(=O)N1", "O=C1C=CC(=O)C=C1", "C=CC#N", "CCCl",
        "CC1=C(Cl)C2=C(C=C1SCCNN(CCO)CCCO)C2", "C#CC(NC(=O)C1=CN=C2C(C)=NO2)=C1C(N)=O",
        "OC(CC1=CC(Cl)=NC=C1)C1=CC=CC=C1Cl", "NCN1C(=O)CC(NC2=CC3=C(CCC3)S2)CCN1",
        "C1=C(N)C=CC(NC(=O)C2=NNC(=O)C2=O)=C1", "N=CCSC1=NC=C(Cl)C=C1NS(=O)(=O)C1=CC=CO1",
        "ClCC(=O)NC1CCC(CCNC2=CC=CC=C2)C1", "CCOC(=O)CNC1=CC2=C(C=C1)OCCS2(=O)=O",
        "C1=C(C)SC(SCC2CC(C(=O)NCCOC(C)C)N2)=N1", "CNC(=O)NC(NC=C)=CS1=CSC(NC(=O)CC)=CS1",
        "C1=CCN=C1NC(=O)C(C)CS1=CC=NC=C1C(N)=O", "OC(O)C1=CSC(N2C3=NC=CC=C3N2)C1(O)C1CC1",
        "CCOC1=CC=C(CC2=NC(O)=NC(O)=C2)C(=O)C1=O", "OC1=CC=CC=C1C1NC(NCCO)=CC(Cl)=C1O",
        "O=CNC1=NC(CC2=C(Br)C=C(F)C=C2)=C(SC)N1", "NCOCCN1C=NN=C1C(=O)OC1=CC(O)=C(Cl)C1=O",
        "O=C1N(C(=O)NC(CO)CCC)C1C1=CC=C(Cl)C=C1", "CN(C1=CC=CS1)C1=CN(CC(=O)OC)C=CC(F)=C1",
        "O=S(=O)(C1=CC=CC(OCCN2C3CCCO3)=C2N)C=C1", "CN(C)C1=CC(C)=C(NC(=O)C2=CC=CO2)C=C1",
        "OC1CN(C2=C(Cl)C=CC=C2S1)NNC(=O)N1CCCC1", "COC1=CC(NC(C)CC=CNC(=O)C=C)=C(F)C=C1Br",
        "C=C(C)C1=CC=CS1C(=O)N1CCOCC1", "OC1=C(N2C=CN=C2C)SC=C1NC1=C(F)C=CC=C1"]
    mols = [m for m in map(chemistry.to_mol, inputs["gen"] + inputs["test"] + alerts) if m is not None]
    patterns = molecules.filter_patterns()
    hits, candidates = 0, 0
    for mol in mols:
        with_hydrogens = Chem.AddHs(mol)
        matching = {i for i, p in enumerate(patterns) if with_hydrogens.HasSubstructMatch(p)}
        screened = set(molecules.filter_candidates(with_hydrogens).tolist())
        assert matching <= screened, Chem.MolToSmiles(mol)
        hits += len(matching)
        candidates += len(screened)
    assert len(mols) > 250 and hits >= 35
    assert candidates < 0.2 * len(mols) * len(patterns)


def test_default_reference_takes_moses_fcd_statistics_over_cached_ones(monkeypatch):
    """A MOSES split's cache entry may hold ChemNet statistics recomputed from its SMILES (any
    reference_stats(..., include_fcd=True) call on it leaves them there); FCD/Test still uses
    the statistics MOSES ships, as MOSES does."""
    import dataclasses

    base = references.ReferenceStats(0, np.zeros((0, 128), np.uint8), {}, {})
    recomputed = dataclasses.replace(base, fcd_mean=np.ones(2), fcd_covariance=np.eye(2))
    monkeypatch.setattr(moses_files, "_DEFAULT_REFERENCES", {})
    monkeypatch.setattr(moses_files, "read_sequences",
                        lambda source: types.SimpleNamespace(texts=["CCO"]))
    monkeypatch.setattr(moses_files, "reference_stats", lambda *a, **k: recomputed)
    monkeypatch.setattr(moses_files, "_moses_fcd_statistics",
                        lambda split: {"mean": np.zeros(2), "covariance": np.zeros((2, 2))})
    stats = moses_files.default_reference("test", True, False, lambda line: None)
    np.testing.assert_array_equal(stats.fcd_mean, np.zeros(2))
