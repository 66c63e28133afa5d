"""MOSES's metric suite (``get_all_metrics``) on a list of generated SMILES: every metric of
``seqvae.evaluation.metrics`` against MOSES's splits or given references, each molecule's
features computed once."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from seqvae import parallel
from seqvae.data.sources import read_sequences
from seqvae.evaluation import chemnet
from seqvae.evaluation import molecules as molecule_lib
from seqvae.evaluation.metrics import (fraction_passes_filters_of, frag_similarity_of,
                                       internal_diversity_of, novelty_of, property_distance_of,
                                       scaffold_similarity_of, snn_of, unique_fraction)
from seqvae.evaluation.molecules import (MOLECULE_PARTS, PROPERTY_NAMES,
                                         Progress, canonical_twice, distinct)
from seqvae.evaluation.moses_files import default_reference
from seqvae.evaluation.references import ReferenceStats, reference_stats


def fcd_available(include_fcd: bool, notes: list[str]) -> bool:
    """Whether FCD can be computed as asked: False, with a note in ``notes``, where it was not
    asked for or its extra (torch, fcd) is missing."""
    if not include_fcd:
        notes.append("FCD not computed: include_fcd=False")
        return False
    try:
        chemnet.import_fcd()
    except chemnet.MissingExtraError as error:
        notes.append(f"FCD not computed: {error}")
        return False
    return True


def moses_metrics(
    gen: Sequence[str],
    train: Iterable[str] | None = None,
    test: Sequence[str] | ReferenceStats | None = None,
    test_scaffolds: Sequence[str] | ReferenceStats | None = None,
    *,
    include_fcd: bool = True,
    k: Sequence[int] = (1000, 10000),
    progress: Progress = None,
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """MOSES's ``get_all_metrics`` set.

    ``valid`` is computed on all of ``gen``; every other metric on its valid molecules as canonical
    SMILES (MOSES's ``remove_invalid``), duplicates kept. A reference left as None is MOSES's own
    split read from the molsets package, as in MOSES. Reference statistics come from the user
    cache (``reference_stats``); ``ReferenceStats`` may also be passed directly.

    Args:
        gen: Generated SMILES.
        train: Training SMILES for Novelty (canonical, as MOSES's are).
        test: Test SMILES or their ``ReferenceStats`` (with ``include_properties`` for the
            Wasserstein distances).
        test_scaffolds: Scaffold-split test SMILES or their ``ReferenceStats``.
        include_fcd: Compute FCD/Test and FCD/TestSF (needs the fcd extra).
        k: The sizes for unique@k.
        progress: Called with a status line before each step.
        notes: Gets one line per metric not computed (FCD without the extra) or computed on
            fewer molecules than asked (unique@k), each starting with the metric's name.

    Returns:
        {"valid", "unique@1000", "unique@10000", "FCD/Test", "SNN/Test", "Frag/Test", "Scaf/Test",
        "FCD/TestSF", "SNN/TestSF", "Frag/TestSF", "Scaf/TestSF", "IntDiv", "IntDiv2", "Filters",
        "Novelty", "logP", "SA", "QED", "weight"}: floats (nan where undefined); the last four are
        ``property_distance`` to ``test``. FCD values are None when not computed, and the property
        distances None when ``test`` is a ``ReferenceStats`` without properties, with the reason
        in ``notes``.
    """
    report = progress or (lambda line: None)
    metrics: dict[str, Any] = {}
    notes = [] if notes is None else notes
    include_fcd = fcd_available(include_fcd, notes)

    report(f"validity of {len(gen)} generated SMILES")
    chunks = parallel.map_chunks(canonical_twice, list(gen), report, "validity", molecule_lib.PARALLEL_MIN_GENERATED)
    valid = [first for chunk in chunks for first, _ in chunk]  # what fraction_valid counts
    canonical = [second for chunk in chunks for _, second in chunk]
    metrics["valid"] = 1 - (len(gen) - len(valid)) / len(gen) if gen else math.nan  # as MOSES
    for size in k:
        if len(canonical) < size:
            notes.append(f"unique@{size}: only {len(canonical)} valid molecules, all of them used")
        metrics[f"unique@{size}"] = unique_fraction(canonical[:size])
    report("fingerprints, fragments, scaffolds, filters and properties of the valid molecules")
    molecules = distinct(valid, MOLECULE_PARTS, progress, keys=canonical)
    if include_fcd:
        report("ChemNet activations of the generated molecules")
        gen_chemnet = chemnet.chemnet_statistics([s for s in canonical if s is not None])

    references = {"Test": test, "TestSF": test_scaffolds}
    for name, default_split in (("Test", "test"), ("TestSF", "test_scaffolds")):
        ref = references[name]
        if ref is None:
            report(f"reference {name}: MOSES {default_split} split (computed once per process)")
            ref = default_reference(default_split, include_fcd, name == "Test", progress)
        elif not isinstance(ref, ReferenceStats):
            report(f"reference {name}: {len(ref)} SMILES")
            ref = reference_stats(ref, include_fcd=include_fcd, include_properties=name == "Test",
                                  progress=progress)
        if name == "Test":
            test_stats = ref
        metrics[f"FCD/{name}"] = None
        if include_fcd:
            if ref.fcd_mean is None:
                notes.append(f"FCD/{name} not computed: its ReferenceStats has no FCD statistics")
            else:
                metrics[f"FCD/{name}"] = chemnet.frechet_distance(
                    gen_chemnet, (ref.fcd_mean, ref.fcd_covariance)
                )
        report(f"SNN/{name}")
        metrics[f"SNN/{name}"] = snn_of(molecules, ref)
        report(f"Frag/{name}")
        metrics[f"Frag/{name}"] = frag_similarity_of(molecules, ref)
        report(f"Scaf/{name}")
        metrics[f"Scaf/{name}"] = scaffold_similarity_of(molecules, ref)

    report("IntDiv, IntDiv2")
    metrics["IntDiv"] = internal_diversity_of(molecules, 1)
    metrics["IntDiv2"] = internal_diversity_of(molecules, 2)
    report("Filters")
    metrics["Filters"] = fraction_passes_filters_of(molecules)
    report("Novelty")
    if train is None:
        train = read_sequences("moses:train").texts
    metrics["Novelty"] = novelty_of(set(canonical) - {None}, train)
    report("logP, SA, QED, weight")
    if test_stats.properties is None and test_stats.size:
        notes.append("logP, SA, QED, weight not computed: the test ReferenceStats has no "
                     "properties; build it with reference_stats(..., include_properties=True)")
        metrics.update(dict.fromkeys(PROPERTY_NAMES))
    else:
        for prop, values in molecules.features["properties"].items():
            metrics[prop] = property_distance_of(values, molecules, test_stats, prop)
    return metrics
