"""Workflows that chain the library's steps: a run (train, keep the aggregate prior, export)
and the demo (that, then a property head, samples and reconstructions), each a Python call the
command line only parses arguments for."""

from __future__ import annotations

import os
import time
from typing import Callable

from seqvae.files import write_text_atomic
from seqvae.messages import note

# The demo's property head: what ``seqvae optimize`` and the explorer offer, fitted on the
# encodings of this many MOSES training molecules (RDKit's properties of 20,000 molecules and the
# head's fit take about a minute on 2 CPU cores), its R² reported on DEMO_HEAD_TEST test molecules.
DEMO_HEAD_MOLECULES = 20_000
DEMO_HEAD_TEST = 2_000


def train(config, run_dir: str, data=None, *, resume: bool = False, strict: bool = False,
          strategy="default", report: Callable[[str], None] | None = None, codec=None,
          init=None) -> dict:
    """Trains a run (``seqvae.training.loop.train``: same arguments and summary), then, unless
    it was interrupted, keeps its aggregate prior (``model.prior=aggregate``) and writes its
    SavedModel (``train.export_at_end``); a run that had already finished gets only what it
    lacks."""
    from seqvae.training.loop import train as train_loop

    summary = train_loop(config, run_dir, data, resume=resume, strict=strict, strategy=strategy,
                         codec=codec, init=init)
    if not summary["chief"] or summary["stop_reason"] == "interrupted":
        return summary
    fresh = not summary.get("already_finished")
    if config.model.prior == "aggregate" and (
            fresh or not os.path.exists(os.path.join(run_dir, "latent_prior.npz"))):
        keep_aggregate_prior(run_dir, config, summary["data"], report)
    if config.train.export_at_end and (
            fresh or not os.path.isdir(os.path.join(run_dir, "saved_model"))):
        from seqvae.export import export

        export(run_dir, os.path.join(run_dir, "saved_model"))
    return summary


def keep_aggregate_prior(run_dir: str, config, data, report: Callable[[str], None] | None = None
                         ) -> None:
    """``model.prior=aggregate``: keeps the aggregate posterior of ``model.prior_encodings``
    training sequences drawn at random (``data.sample_ids``) as the run's prior
    (``seqvae.latent_prior.fit_aggregate``)."""
    from seqvae import inference, latent_prior
    from seqvae.run import load_run

    started = time.monotonic()
    ids = data.sample_ids(config.model.prior_encodings, config.train.seed)
    mean, log_var = inference.encode_batches(load_run(run_dir), ids)
    latent_prior.save(run_dir, latent_prior.fit_aggregate(mean, log_var, data.source,
                                                          config.model.prior_widen))
    (report or note)(
        f"seqvae: prior: the aggregate posterior of {len(ids):,} training sequences drawn at "
        f"random, each q(z|x) widened {config.model.prior_widen:g}x "
        f"({time.monotonic() - started:.0f} s); sample and evaluate draw z from it")


def run_demo(out: str, n: int = 1000, temperatures: tuple[float, ...] = (1.0, 0.7),
             seed: int = 0, grammar: bool = True, raw: bool = False, resume: bool = False,
             time_budget: float | None = None, report: Callable[[str], None] = print) -> dict:
    """Trains the demo configuration on the bundled MOSES data into ``out``, fits its property
    head, samples ``n`` molecules at each temperature and reconstructs ``n`` random MOSES test
    molecules; ``report`` gets one line per result.

    Args:
      out: the run directory (continued with ``resume``).
      n: molecules sampled per temperature and test molecules reconstructed.
      temperatures: sampling temperatures; the samples go to ``out/samples_t{T}.smi``.
      seed: the sampling seed.
      grammar: decode under the SMILES grammar (rejection or mask, as the run samples).
      raw: write molecules as the model writes them (Kekule SMILES), not canonical SMILES.
      resume: continue ``out``'s run.
      time_budget: stop training after this many seconds (None: the preset's 2,000 steps).

    Returns:
      ``{"summary": training summary, "samples": {T: path}, "reconstruction": dict,
      "property_head": head.json contents or None, "seconds": wall time}``.
    """
    from seqvae import inference
    from seqvae.presets import demo_config
    from seqvae.data.chemistry import remove_invalid
    from seqvae.data.sources import random_subset, read_sequences
    from seqvae.evaluation.metrics import fraction_unique, fraction_valid
    from seqvae.property_fit import DEFAULT_PROPERTIES, HEAD_DIR, fit_properties
    from seqvae.run import load_run

    started = time.monotonic()
    config = demo_config().with_overrides(
        [f"train.time_budget={time_budget}"] if time_budget is not None else [])
    summary = train(config, out, None, resume=resume)
    if not summary.get("already_finished"):
        for line in train_summary_lines(summary):
            report(line)
    head = None
    if not os.path.exists(os.path.join(out, HEAD_DIR, "head.json")):
        head_started = time.monotonic()
        head = fit_properties(out, DEFAULT_PROPERTIES, limit=DEMO_HEAD_MOLECULES,
                              test="moses:test", test_limit=DEMO_HEAD_TEST)
        r2 = ", ".join(f"{name} {head['test'][name]['r2']:.2f}" for name in head["names"]
                       if head["test"] and name in head["test"])
        report(f"fitted a property head ({', '.join(head['names'])}) on "
               f"{head['fit_molecules']:,} encodings in {time.monotonic() - head_started:.0f}s "
               f"for seqvae optimize and the explorer; R² on {DEMO_HEAD_TEST:,} test molecules: "
               f"{r2}")
    run = load_run(out)
    run.raw_output = raw
    paths = {}
    for temperature in temperatures:
        stats: dict = {}
        samples = inference.sample(run, n, temperature=temperature, seed=seed, grammar=grammar,
                                   stats=stats)
        paths[temperature] = os.path.join(out, f"samples_t{temperature:g}.smi")
        write_text_atomic(paths[temperature], "".join(f"{text}\n" for text in samples))
        valid = remove_invalid(samples)
        unique = fraction_unique(valid) if valid else 0.0
        how = (f" (by rejection under the grammar: {100 * stats['rejected']:.1f}% of first draws "
               f"rejected, {100 * stats['masked']:.1f}% masked)" if stats.get("rejected") else "")
        report(f"sampled {len(samples)} molecules from the prior at temperature {temperature:g} "
               f"(z from {inference.describe_prior(run)}): "
               f"valid {100 * fraction_valid(samples):.1f}%, unique (of valid) {100 * unique:.1f}%"
               f"{how} -> {paths[temperature]}")
    # drawn at random: MOSES's test file is ordered, its first lines are not a sample of it
    test = random_subset(read_sequences("moses:test"), n, seed=0).texts
    greedy = inference.reconstruct(run, test, num_samples=0, grammar=grammar)
    report(f"reconstructed {100 * greedy['exact_match_mean_z']:.1f}% of {len(test)} MOSES test "
           f"molecules drawn at random exactly (greedy from the mean of q(z|x); token accuracy "
           f"{100 * greedy['token_accuracy_mean_z']:.1f}%)")
    seconds = time.monotonic() - started
    report(f"total wall time {seconds:.0f}s; run directory: {out}")
    return {"summary": summary, "samples": paths, "reconstruction": greedy,
            "property_head": head, "seconds": seconds}


def train_summary_lines(summary: dict) -> list[str]:
    """What a finished training reports: steps, stop reason, speed, last losses, padding, and
    where the run is."""
    last = summary["last"]
    return [f"trained {summary['steps']} steps ({summary['stop_reason']}) in "
            f"{summary['train_seconds']:.0f}s at {summary['sequences_per_second']:.0f} "
            f"sequences/s; loss {last.get('loss', float('nan')):.4f} recon "
            f"{last.get('recon', float('nan')):.4f} kl {last.get('kl', float('nan')):.2f}; "
            f"padding {100 * (summary['padding_fraction'] or 0):.1f}%",
            f"run directory: {summary['run_dir']}"]
