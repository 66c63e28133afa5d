"""Evaluating a trained run: samples and their MOSES metrics, likelihood bounds, the latent space.

``evaluate(run_dir)`` is what ``seqvae evaluate`` runs: it samples from the prior, scores the
samples with ``moses_metrics``, measures the VAE itself on held-out sequences (``vae_quality``),
runs the reconstruction protocol of Kusner et al. 2017 (``reconstruction``), and writes
``RUN_DIR/report/`` (``report``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from seqvae import inference
from seqvae.config import EVALUATE_QUALITY_SEQUENCES, EVALUATE_RECON_MOLECULES
from seqvae.data import chemistry
from seqvae.data.moses import is_moses
from seqvae.data.preparation import encode_texts
from seqvae.data.sources import random_rows, read_sequences
from seqvae.errors import SeqvaeError
from seqvae.evaluation import molecules, moses_metrics, references
from seqvae.evaluation.reconstruction import interpolation_protocol, reconstruction_protocol
from seqvae.evaluation.vae_quality import posterior_and_bounds
from seqvae.run import Run, finetune_files, load_run
from seqvae.messages import note


def print_to_stderr(line: str) -> None:
    """The default progress callback: one ``seqvae evaluate:`` line on stderr."""
    note(f"seqvae evaluate: {line}")


# --- the whole evaluation ------------------------------------------------------------------------


def _read_texts(source, column: str) -> list[str] | None:
    if source is None:
        return None
    if isinstance(source, (list, tuple)):
        return [str(t) for t in source]
    return read_sequences(source, column).texts


def _generation_metrics(samples: list[str], train, test, test_scaffolds, include_fcd: bool,
                        progress, notes: list[str]) -> dict:
    """``moses_metrics`` with None for (and a note on) the metrics whose reference is missing.

    ``"default"`` references are MOSES's own splits (statistics from the user cache).
    """
    missing = [name for name, ref in (("Test", test), ("TestSF", test_scaffolds)) if ref is None]
    no_bits = np.zeros((0, molecules.FINGERPRINT_BITS // 8), np.uint8)
    empty = references.ReferenceStats(0, no_bits, {}, {})
    size = len(samples)
    k = tuple(s for s in (1000, 10000) if s <= size) or (size,)
    found: list[str] = []
    values = moses_metrics.moses_metrics(
            samples,
            train=None if train == "default" else (train if train is not None else frozenset()),
            test=empty if test is None else (None if test == "default" else test),
            test_scaffolds=empty if test_scaffolds is None else (
                None if test_scaffolds == "default" else test_scaffolds),
            include_fcd=include_fcd, k=k, progress=progress, notes=found)
    notes.extend(note for note in found
                 if not any(note.startswith(f"FCD/{name} ") for name in missing))
    for name, argument in (("Test", "test"), ("TestSF", "test_scaffolds")):
        if name in missing:
            for metric in ("FCD", "SNN", "Frag", "Scaf"):
                values[f"{metric}/{name}"] = None
            notes.append(f"FCD/{name}, SNN/{name}, Frag/{name}, Scaf/{name} not computed: "
                         f"no {argument} set given")
    if "Test" in missing:
        values.update(dict.fromkeys(molecules.PROPERTY_NAMES))
        notes.append("logP, SA, QED, weight (Wasserstein distances to test) not computed: "
                     "no test set given")
    if train is None:
        values["Novelty"] = None
        notes.append("Novelty not computed: no train set given")
    return values


def evaluate(run_dir: str, *, n_samples: int = 30000, test=None, test_scaffolds=None, train=None,
             include_fcd: bool = True, iw_samples: int = 10,
             recon_molecules: int = EVALUATE_RECON_MOLECULES,
             quality_sequences: int = EVALUATE_QUALITY_SEQUENCES, seed: int = 0,
             grammar: bool = True, prior: str | None = None, rejection: int | None = None,
             progress: Callable[[str], None] | None = print_to_stderr,
             report_dir: str | None = None) -> dict:
    """Evaluates a run and writes ``RUN_DIR/report/`` (see ``seqvae.report.write_report``).

    References: a run trained on MOSES (``run.json`` ``data_source`` ``moses:...``) defaults to
    MOSES's test, test_scaffolds and train splits, as MOSES reports; a fine-tuned run
    (``seqvae finetune``) to the molecules it held out and those it was fine-tuned on
    (``run.finetune_files``); otherwise only the sets given
    are used and the metrics that need a missing one are None, with a note. Held-out sequences
    the run cannot encode (unknown tokens, too long, invalid SMILES) are left out, with a note.

    Args:
      run_dir: a trained run directory.
      n_samples: molecules sampled from the prior (MOSES: 30,000).
      test, test_scaffolds, train: SMILES lists, paths or ``moses:SPLIT``. ``test`` is also the
        held-out set of ``vae_quality`` and ``reconstruction_protocol``. A given ``train`` is
        canonicalized for Novelty (MOSES's own split already is).
      include_fcd: compute FCD (needs the fcd extra; a note if it is missing).
      iw_samples: K of the importance-weighted bound.
      recon_molecules: molecules in the reconstruction protocol (0 skips it). The default, 100
        (10,000 decodings, as ``bench/latent_ablation.py``), gives the rate to about +-0.01 at
        the demo's rates (its standard error over molecules is reported); 1,000 takes 10 times
        as long.
      quality_sequences: this many test sequences, drawn at random (seeded by ``seed``, as the
        molecules of the reconstruction protocol: MOSES's test file is ordered, its first lines
        are not a sample of it), go to ``vae_quality`` (0 skips it);
        the default, 1,000, gives the IW-NLL to about a quarter of a nat (standard error
        reported).
      seed: seeds sampling, the bounds and the protocol.
      grammar: decode SMILES runs under the grammar mask (sampling and reconstruction); the
        results say whether it was on (``grammar``).
      prior: ``standard`` (N(0, I)) or ``fitted`` (``seqvae.latent_prior``, after
        ``seqvae fit-prior`` or trained with ``model.prior=aggregate``): where the generation
        metrics' samples come from; None: the run's own (``inference.run_prior``).
      rejection: R > 0 samples SMILES runs from the model conditioned on the grammar
        (``inference.rejection_sample``) instead of under its mask; None: the run's
        ``model.rejection_rounds``. The results' ``sampling`` says the rounds, how many first
        draws the grammar rejected and how many were masked in the end.
      progress: called with status lines; None for silence.
      report_dir: where the report goes (None: ``RUN_DIR/report``; for a model that ships with
        seqvae, read-only, ``pretrained/NAME/report`` in the user's cache: ``Run.output_dir``).

    Returns:
      ``{"run_dir", "n_samples", "seed", "tokenizer", "data_source", "generation", "vae_quality",
      "reconstruction", "references", "wall_seconds", "notes", "report_dir"}``.
    """
    from seqvae.evaluation.report import write_report

    if n_samples < 0 or iw_samples < 1 or recon_molecules < 0 or quality_sequences < 0:
        raise SeqvaeError("n_samples, recon_molecules and quality_sequences must be >= 0 and "
                          "iw_samples >= 1")
    report = progress or (lambda line: None)
    started = time.monotonic()
    walls: dict[str, float] = {}
    run = load_run(run_dir)
    notes: list[str] = []
    molecules = run.codec.molecules
    moses_run = is_moses(run.info.get("data_source"))
    tuned = finetune_files(run.run_dir)
    if tuned:
        test = tuned["held_out"] if test is None else test
        train = tuned["fine_tuning"] if train is None else train
    sets, references = _reference_sets(run, test, test_scaffolds, train, moses_run)
    walls["load"] = time.monotonic() - started

    tick = time.monotonic()
    prior = inference.run_prior(run, prior)
    prior_words = inference.describe_prior(run, prior)
    report(f"sampling {n_samples} sequences from the prior (z from {prior_words})")
    rejection = inference.rejection_rounds(run, rejection, grammar)
    sampling = {"rejection_rounds": rejection}
    samples = inference.sample(run, n_samples, seed=seed, progress=report, grammar=grammar,
                               prior=prior, rejection=rejection, stats=sampling)
    walls["sampling"] = time.monotonic() - tick

    generation = None
    tick = time.monotonic()
    if not molecules:
        notes.append(f"MOSES metrics not computed: the run's tokenizer is "
                     f"{run.info['tokenizer']!r}, not smiles or selfies")
    elif not samples:
        notes.append("MOSES metrics not computed: n_samples is 0")
    else:
        generation = _generation_metrics(samples, sets["train"], sets["test"],
                                         sets["test_scaffolds"], include_fcd, report, notes)
        hint = prior_hint(generation, prior, run.run_dir)
        if hint:
            notes.append(hint)
    walls["generation_metrics"] = time.monotonic() - tick

    held_out, means, quality, reconstruction = [], None, None, None
    test_texts = sets["held_out"]
    if test_texts is None:
        notes.append("vae_quality and reconstruction not computed: no test set given")
    else:
        count = max(quality_sequences, recon_molecules)
        wanted = [test_texts[i] for i in random_rows(len(test_texts), count, seed)]
        held_out = inference.encode_ids(run, wanted, skip=True).texts if wanted else []
        if len(held_out) < len(wanted):
            notes.append(f"{len(wanted) - len(held_out)} of the {len(wanted)} test sequences "
                         "left out of the VAE measures: invalid, with tokens not in the run's "
                         "vocabulary, or longer than its max_len")
    tick = time.monotonic()
    if held_out and quality_sequences > 0:
        report(f"vae_quality on {min(quality_sequences, len(held_out))} test sequences "
               f"(K={iw_samples})")
        ids = encode_texts(run.codec, held_out[:quality_sequences], check_molecules=False).ids
        quality, means = posterior_and_bounds(run, ids, iw_samples, batch_size=500, seed=seed)
    walls["vae_quality"] = time.monotonic() - tick
    tick = time.monotonic()
    if held_out and recon_molecules > 0:
        report(f"reconstruction protocol on {min(recon_molecules, len(held_out))} molecules "
               "(10 encodings x 10 decodings each)")
        reconstruction = reconstruction_protocol(run, held_out, n_molecules=recon_molecules,
                                                 seed=seed, grammar=grammar)
        if len(held_out) >= 2:
            report("interpolation between 100 random pairs of test molecules (8 steps)")
            paths = interpolation_protocol(run, held_out[:recon_molecules], seed=seed,
                                           grammar=grammar)
            reconstruction.update({f"interpolation_{key}": value for key, value in paths.items()
                                   if key in ("valid_intermediates", "distinct_per_path")})
    walls["reconstruction"] = time.monotonic() - tick
    tick = time.monotonic()
    properties = _property_metrics(run, held_out, report, notes, sets["held_out_source"],
                                   max(quality_sequences, recon_molecules))
    walls["properties"] = time.monotonic() - tick
    walls["total"] = time.monotonic() - started

    results = {
        "run_dir": run.run_dir, "n_samples": n_samples, "seed": seed,
        "tokenizer": run.info["tokenizer"], "data_source": run.info.get("data_source"),
        "grammar": bool((grammar or run.config.train.grammar_softmax) and run.grammar is not None),
        "prior": prior, "prior_description": prior_words, "sampling": sampling,
        "generation": generation, "vae_quality": quality, "reconstruction": reconstruction,
        "properties": properties,
        "references": references, "wall_seconds": walls, "notes": notes,
    }
    report("writing the report")
    plotted = held_out[:quality_sequences] if means is not None else held_out
    if means is None and plotted:  # the latent map needs encodings; the report does not encode
        means = inference.encode_batches(run, encode_texts(run.codec, plotted,
                                                           check_molecules=False).ids)[0]
    results["report_dir"] = write_report(run.run_dir, results, samples, plotted, test_means=means,
                                         folder=report_dir or run.output_dir("report"))
    report(f"report written to {results['report_dir']}")
    return results


def prior_hint(generation: dict, prior: str, run_dir: str) -> str | None:
    """A note when samples from N(0, I) repeat (unique@10000, else unique@1000, below 0.95):
    the mark of a run that keeps much in z (a low beta), whose aggregate posterior leaves
    holes in the standard prior that decode to a few molecules. None otherwise."""
    unique = generation.get("unique@10000", generation.get("unique@1000"))
    if prior != "standard" or unique is None or not unique < 0.95:
        return None
    return (f"only {unique:.1%} of the valid samples are unique: N(0, I) has holes where this "
            f"run's encodings are not; sample a prior fitted to them: 'seqvae fit-prior {run_dir} "
            "--components 10', then --prior fitted")


def _property_metrics(run: Run, held_out: list[str], report, notes: list[str],
                      source: str | None = None, limit: int = 0) -> dict | None:
    """R² and MAE of the run's property head (fitted by ``seqvae fit-properties`` or trained
    jointly) on the held-out molecules, as ``{"logp R2": ..., "logp MAE": ..., "molecules": N}``;
    None without a head. With ``source`` (a path or ``moses:SPLIT`` whose first ``limit``
    sequences ``held_out`` holds, less those the run cannot encode), the RDKit properties are
    read from the run's property cache (``RUN/properties/``) or computed into it."""
    from seqvae.property_fit import has_head, head_metrics, load_head

    if not held_out or not has_head(run):
        return None
    report(f"property head: R2 and MAE on {len(held_out)} test molecules")
    data = held_out if source is None else source
    metrics = head_metrics(run, load_head(run), data, limit=limit if source else 0, notes=notes)
    flat = {f"{name} {key}": m[key.lower()] for name, m in metrics.items() for key in ("R2", "MAE")}
    return {**flat, "molecules": min(m["n"] for m in metrics.values())}


def _reference_sets(run: Run, test, test_scaffolds, train, moses_run: bool) -> tuple[dict, dict]:
    """The references for ``_generation_metrics``, the held-out texts (and their source when it
    is a path or a MOSES split, else None), and their descriptions.

    A set not given is ``"default"`` (MOSES's own split) for a MOSES run, None otherwise.
    """
    column = run.config.data.column
    given = {"test": test, "test_scaffolds": test_scaffolds, "train": train}
    sets = {name: _read_texts(source, column) for name, source in given.items()}
    if sets["train"] is not None and run.codec.molecules:
        sets["train"] = chemistry.remove_invalid(sets["train"], canonize=True)
    held_out = sets["test"]
    held_out_source = test if isinstance(test, str) else None  # a path or moses:SPLIT
    if held_out is None and moses_run:
        held_out, held_out_source = read_sequences("moses:test").texts, "moses:test"
    references = {}
    for name, texts in sets.items():
        if texts is None:
            references[name] = f"moses:{name}" if moses_run else None
        else:
            source = given[name] if isinstance(given[name], str) else "list"
            references[name] = f"{source} ({len(texts)} sequences)"
    default = "default" if moses_run else None
    sets = {name: default if texts is None else texts for name, texts in sets.items()}
    if isinstance(sets["train"], list):
        sets["train"] = set(sets["train"])
    return {**sets, "held_out": held_out, "held_out_source": held_out_source}, references
