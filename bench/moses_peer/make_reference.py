"""Reference values of the MOSES 0.3.1 metrics, computed by MOSES's own code, for seqvae's tests.

Run with the peer venv that ``setup.sh`` builds (MOSES needs numpy<2, pandas<2, torch, an old
RDKit); this script never imports seqvae:

    bash bench/moses_peer/setup.sh
    bench/moses_peer/.venv/bin/python bench/moses_peer/make_reference.py

It writes ``tests/evaluation/fixtures/moses_reference.json``: the exact inputs (picked by fixed
slices of the MOSES splits shipped in molsets, plus fixed hand-written strings), the versions of
the stack that computed the values, and every value. ``tests/evaluation/test_moses_agreement.py``
checks seqvae's re-implementation against it on every CI run, without this stack.

What is computed, all with n_jobs=1 and device "cpu":

- ``get_all_metrics``: MOSES's own top-level function, called with custom ``test``,
  ``test_scaffolds`` and ``train`` lists, so it precomputes the reference statistics with
  ``compute_intermediate_statistics`` (FCD through fcd_torch, whose ChemNet weights ship in its
  wheel) exactly as it does for the MOSES splits. All of its values, the Wasserstein distances of
  logP, SA, QED and weight included.
- ``functions``: the metric functions called directly on the raw generated list (invalid entries
  included) where their result differs from the suite's (``fraction_passes_filters`` counts invalid
  entries as failing; the suite passes only valid molecules).
  FCD is also computed on the valid molecules without the multi-fragment ones (SMILES with ".").
- ``properties``: ``logP``, ``SA``, ``QED``, ``weight`` of ``moses.metrics`` per molecule.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import random
import shlex
import sys
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUTPUT = os.path.join(REPO, "tests", "evaluation", "fixtures", "moses_reference.json")

# --- the inputs: fixed slices of the MOSES splits and fixed strings -----------------------------

TEST_REFERENCE = slice(0, 300)  # of the MOSES test split: the "test" reference
TEST_SCAFFOLDS_REFERENCE = slice(0, 300)  # of test_scaffolds: the "test_scaffolds" reference
TRAIN = slice(0, 2000)  # of the train split: "train" for Novelty
GEN_FROM_TEST = slice(1000, 1130)  # 130 molecules not in the test reference
GEN_FROM_TRAIN = slice(0, 25)  # 25 molecules in train: not novel
GEN_FROM_TEST_REFERENCE = slice(0, 10)  # in the test reference: nearest neighbour similarity 1
GEN_FROM_TEST_SCAFFOLDS = slice(0, 5)  # in the test_scaffolds reference
UNIQUE_K = [10, 50, 100, 1000]  # 1000 is more than there are valid molecules: MOSES uses all
SHUFFLE_SEED = 0

# Valid molecules that MOSES's filters reject (the MOSES splits contain none): charged, disallowed
# atoms, rings of 8+ atoms, PAINS and MCF matches.
FILTER_FAILURES = [
    "C[N+](C)(C)C",
    "CP(C)C",
    "C1CCCCCCC1",
    "S=C1SC(=Cc2ccccc2)C(=O)N1",
    "O=C1C=CC(=O)C=C1",
    "C=CC#N",
    "CCCl",
    "CC(=O)[O-].[Na+]",
    "c1ccc2c(c1)Cc1ccccc1-2",
    "CCI",
]

# Strings that are not valid molecules: syntax errors, unclosed rings, bad valence, aromaticity
# that cannot be kekulized, the empty string.
INVALID = [
    "",
    "xx",
    "C1CC",
    "CC(",
    "CC)C",
    "C(C)(C)(C)(C)C",
    "c1cccc1",
    "c1ccccc1c",
    "[Xe",
    "N1CC1)",
    "C=1CC",
    "O=O=O",
    "c1ccncc",
    "CC[N](C)(C)(C)C",
    "Cc1ccccc1)N",
]

# Molecules for the per-molecule properties: taken from the generated set below, plus a few that
# exercise SA's macrocycle, stereo and charge terms and QED's alerts.
PROPERTY_EXTRA = [
    "C1CCCCCCCCCCC1",
    "C[C@H](N)C(=O)O",
    "C[N+](C)(C)CC(=O)[O-]",
    "O=[N+]([O-])c1ccc(Cl)cc1",
    "CC(C)Cc1ccc([C@@H](C)C(=O)O)cc1",
]
PROPERTY_FROM_GEN = 15


def _gen(splits, chem) -> list[str]:
    """~200 "generated" SMILES: valid molecules, repeats, non-canonical forms, invalid strings."""
    test, test_scaffolds, train = splits["test"], splits["test_scaffolds"], splits["train"]
    valid = (
        list(test[GEN_FROM_TEST])
        + list(train[GEN_FROM_TRAIN])
        + list(test[GEN_FROM_TEST_REFERENCE])
        + list(test_scaffolds[GEN_FROM_TEST_SCAFFOLDS])
        + FILTER_FAILURES
    )
    repeats = valid[0:60:6]  # the same strings again
    # the same molecules written differently: non-canonical SMILES rooted at atom 1
    variants = [
        chem.MolToSmiles(chem.MolFromSmiles(s), canonical=False, rootedAtAtom=1)
        for s in valid[3:120:15]
    ]
    gen = valid + repeats + variants + INVALID
    random.Random(SHUFFLE_SEED).shuffle(gen)
    return gen


def _versions() -> dict:
    import moses
    import numpy
    import pandas
    import rdkit
    import scipy
    import torch

    return {
        "python": platform.python_version(),
        "moses (molsets)": moses.__version__,
        "rdkit": rdkit.__version__,
        "numpy": numpy.__version__,
        "pandas": pandas.__version__,
        "scipy": scipy.__version__,
        "torch": torch.__version__,
        "fcd_torch": importlib.metadata.version("fcd_torch"),
    }


def _number(value) -> float | None:
    value = float(value)
    return None if math.isnan(value) else value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=DEFAULT_OUTPUT)
    args = parser.parse_args()

    warnings.simplefilter("ignore")  # deprecations of the old stack; unique@1000's short-list note
    import moses
    from moses.metrics import metrics as moses_metrics
    from moses.metrics import utils as moses_utils
    from rdkit import Chem, RDLogger

    RDLogger.DisableLog("rdApp.*")
    splits = {name: moses.get_dataset(name) for name in ("train", "test", "test_scaffolds")}
    test = list(splits["test"][TEST_REFERENCE])
    test_scaffolds = list(splits["test_scaffolds"][TEST_SCAFFOLDS_REFERENCE])
    train = list(splits["train"][TRAIN])
    gen = _gen(splits, Chem)

    suite = moses.get_all_metrics(
        gen, k=UNIQUE_K, n_jobs=1, device="cpu", batch_size=512,
        test=test, test_scaffolds=test_scaffolds, train=train,
    )
    RDLogger.DisableLog("rdApp.*")  # get_all_metrics turns RDKit's log back on at its end
    valid = moses_metrics.remove_invalid(gen, canonize=True)
    compared = {k: _number(v) for k, v in suite.items()}

    functions = {
        "fraction_valid(gen)": moses_metrics.fraction_valid(gen),
        "fraction_unique(valid)": moses_metrics.fraction_unique(valid),
        "fraction_passes_filters(gen)": moses_metrics.fraction_passes_filters(gen),
        "novelty(gen, train)": moses_metrics.novelty(gen, train),
    }
    # FCD once more without the multi-fragment molecules (SMILES with "."): fcd_torch's one-hot
    # encoding ends a SMILES at its first "." (it is also the end token), so these values isolate
    # the rest of the FCD computation from how such molecules are encoded.
    single_fragment = [s for s in valid if "." not in s]
    fcd_metric = moses_metrics.FCDMetric(n_jobs=1, device="cpu", batch_size=512)
    for name, ref in (("test", test), ("test_scaffolds", test_scaffolds)):
        functions[f"FCD(valid single-fragment, {name})"] = fcd_metric(gen=single_fragment, ref=ref)

    valid_distinct = list(dict.fromkeys(valid))
    property_smiles = valid_distinct[:PROPERTY_FROM_GEN] + PROPERTY_EXTRA
    properties = {}
    for smiles in property_smiles:
        mol = moses_utils.get_mol(smiles)
        properties[smiles] = {
            "logP": moses_utils.logP(mol),
            "SA": moses_utils.SA(mol),
            "QED": moses_utils.QED(mol),
            "weight": moses_utils.weight(mol),
        }

    assert "seqvae" not in sys.modules, "the reference must not come from seqvae's code"
    command = "bench/moses_peer/.venv/bin/python bench/moses_peer/make_reference.py"
    if args.output != DEFAULT_OUTPUT:
        command += " --output " + shlex.quote(args.output)
    fixture = {
        "about": (
            "MOSES 0.3.1 metrics computed by MOSES's own code (molsets wheel, fcd_torch) on the "
            "inputs below; seqvae's tests/evaluation/test_moses_agreement.py checks its "
            "re-implementation against these values. Regenerate with the command (after "
            "bash bench/moses_peer/setup.sh)."
        ),
        "command": command,
        "versions": _versions(),
        "settings": {"n_jobs": 1, "device": "cpu", "batch_size": 512, "k": UNIQUE_K},
        "inputs": {
            "gen": gen,
            "test": test,
            "test_scaffolds": test_scaffolds,
            "train": train,
            "how": {
                "test": f"MOSES test split rows {TEST_REFERENCE.start}:{TEST_REFERENCE.stop}",
                "test_scaffolds": (
                    f"MOSES test_scaffolds split rows "
                    f"{TEST_SCAFFOLDS_REFERENCE.start}:{TEST_SCAFFOLDS_REFERENCE.stop}"
                ),
                "train": f"MOSES train split rows {TRAIN.start}:{TRAIN.stop}",
                "gen": (
                    f"test rows {GEN_FROM_TEST.start}:{GEN_FROM_TEST.stop}, train rows "
                    f"{GEN_FROM_TRAIN.start}:{GEN_FROM_TRAIN.stop}, test rows "
                    f"{GEN_FROM_TEST_REFERENCE.start}:{GEN_FROM_TEST_REFERENCE.stop}, "
                    f"test_scaffolds rows {GEN_FROM_TEST_SCAFFOLDS.start}:"
                    f"{GEN_FROM_TEST_SCAFFOLDS.stop}, {len(FILTER_FAILURES)} molecules failing "
                    f"the filters, 10 repeated strings, 8 non-canonical rewritings, "
                    f"{len(INVALID)} invalid strings; shuffled with random.Random({SHUFFLE_SEED})"
                ),
            },
        },
        "valid_canonical": valid,
        "get_all_metrics": compared,
        "functions": {k: _number(v) for k, v in functions.items()},
        "properties": properties,
        "fcd": {
            "computed": True,
            "how": (
                "fcd_torch.FCD (ChemNet weights from the fcd_torch wheel): FCD/Test and FCD/TestSF "
                "via get_all_metrics; FCD(valid single-fragment, ...) by FCDMetric()(gen=..., "
                "ref=...) on the valid canonical SMILES that contain no '.'"
            ),
        },
    }
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(fixture, f, indent=1, allow_nan=False)
        f.write("\n")
    print(f"wrote {args.output} ({os.path.getsize(args.output)} bytes)")
    for name, value in compared.items():
        print(f"  {name:14s} {value}")


if __name__ == "__main__":
    main()
