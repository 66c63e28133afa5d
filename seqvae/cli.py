"""The ``seqvae`` command line: it parses arguments and calls the library, nothing more.

Errors in the user's input are ``SeqvaeError`` s: printed as one line, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading


def _quiet_tensorflow() -> None:
    """Imports TensorFlow with its start-up log lines (oneDNN, CUDA probing) silenced.

    TensorFlow's C++ logging writes them before ``TF_CPP_MIN_LOG_LEVEL`` is read, so file
    descriptor 2 is pointed at /dev/null for the import. Set SEQVAE_TF_LOGS=1 to see them.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if os.environ.get("SEQVAE_TF_LOGS"):
        return
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def parse_duration(text: str) -> float:
    """``"90"``, ``"90s"``, ``"15m"``, ``"1.5h"`` -> seconds."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smh]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s, 15m or 2h, got {text!r}")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def parse_fractions(text: str) -> tuple[float, ...]:
    """``"0.5,0.7"`` -> ``(0.5, 0.7)``; ``""`` -> ``()``."""
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, e.g. 0.5,0.7, "
                                         f"got {text!r}") from None


def _build_config(args, stored=None):
    """The config the arguments describe: ``--config`` or ``--preset`` (default demo, or the
    stored run's config when resuming without either), then ``--set`` and the flags."""
    from seqvae.config import load_config, preset_config

    if args.config:
        config = load_config(args.config)
    elif args.preset or stored is None:
        own_data = getattr(args, "data", None) and not str(args.data).startswith("moses:")
        config = preset_config(args.preset or ("user" if own_data else "demo"))
    else:
        config = stored
    overrides = list(args.set or [])
    if getattr(args, "stream", False):
        overrides.append("data.streaming=true")
    if getattr(args, "max_steps", None) and getattr(args, "epochs", None) is None:
        overrides.append("train.epochs=1000000")  # --max-steps alone means "this many steps"
    for flag, key in (("epochs", "train.epochs"), ("max_steps", "train.max_steps"),
                      ("time_budget", "train.time_budget"), ("limit", "data.limit"),
                      ("seed", "train.seed"), ("properties", "data.properties")):
        value = getattr(args, flag, None)
        if value is not None:
            overrides.append(f"{key}={value}")
    return config.with_overrides(overrides)


def cmd_train(args) -> int:
    from seqvae.training.loop import train

    stored = None
    if args.resume and os.path.exists(os.path.join(args.out, "run.json")):  # else: starts it
        from seqvae.training.rundir import read_run_files

        stored = read_run_files(args.out).config
    config = _build_config(args, stored)  # train() refuses settings that differ from the run's
    summary = train(config, args.out, args.data, resume=args.resume, strict=args.strict,
                    strategy=args.strategy)
    if not summary.get("already_finished"):
        _print_train_summary(summary)
    print(f"weights checksum {summary['weights_checksum']}")
    return 0


def _print_train_summary(summary: dict) -> None:
    from seqvae.workflows import train_summary_lines

    print("\n".join(train_summary_lines(summary)))


def _load(run_dir: str, raw: bool = False):
    """The run, its molecules written as the model writes them with ``raw`` (``--raw``)."""
    from seqvae.training.rundir import load_run

    run = load_run(run_dir)
    run.raw_output = raw
    return run


def _write_lines(lines, out: str | None, run=None) -> None:
    """Texts to ``out`` (one a line) or stdout; to ``out.npy`` as a one-hot array ``(N, T, C)``
    for a run trained on arrays (its tokens are class ids)."""
    if out and out.endswith(".npy") and run is not None:
        import numpy as np

        from seqvae.data.sources import to_one_hot
        from seqvae.errors import SeqvaeError
        from seqvae.files import atomic_path

        classes = len(run.vocab) - 4
        if run.info["tokenizer"] != "word" or run.vocab.tokens[4:] != [str(c) for c in range(classes)]:
            raise SeqvaeError(f"--out {out}: a one-hot .npy array is written for runs trained on "
                              "arrays (class ids); write text (.smi, .txt) for this run")
        array, cut = to_one_hot(list(lines), classes, run.max_len - 1)
        if cut:
            print(f"seqvae: {cut} sequences did not end within the array's {run.max_len - 1} "
                  "positions; cut there", file=sys.stderr)
        with atomic_path(out, suffix=".npy") as tmp:
            np.save(tmp, array)
        return
    text = "".join(f"{line}\n" for line in lines)
    if out:
        from seqvae.files import write_text_atomic

        write_text_atomic(out, text)
    else:
        sys.stdout.write(text)


def _check_sampling(args) -> None:
    from seqvae.errors import SeqvaeError

    if getattr(args, "n", 1) < 0:
        raise SeqvaeError(f"-n must be >= 0, got {args.n}")
    if args.temperature < 0:
        raise SeqvaeError(f"--temperature must be >= 0 (0 = greedy), got {args.temperature}")
    if args.top_k < 0:
        raise SeqvaeError(f"--top-k must be >= 0 (0 = off), got {args.top_k}")


def cmd_sample(args) -> int:
    from seqvae import inference

    _check_sampling(args)

    run = _load(args.run_dir, raw=args.raw)
    texts = inference.sample(run, args.n, temperature=args.temperature, top_k=args.top_k,
                             greedy=args.greedy, seed=args.seed, grammar=not args.no_grammar,
                             prior=args.prior, rejection=args.rejection)
    if args.valid_only:
        from seqvae.data.chemistry import canonical_smiles

        texts = [t for t in texts if canonical_smiles(t) is not None]
    if args.unique:
        texts = list(dict.fromkeys(texts))
    _write_lines(texts, args.out, run)
    return 0


def cmd_fit_prior(args) -> int:
    import numpy as np

    from seqvae import inference
    from seqvae.errors import SeqvaeError

    run = _load(args.run_dir)
    data = args.data or run.info.get("data_source") or "moses:train"
    if data in ("list", "array"):
        raise SeqvaeError(f"{args.run_dir} was trained on in-memory data: give DATA to fit to")
    prior = inference.fit_prior(run, data, limit=args.limit, components=args.components,
                                aggregate=args.aggregate, widen=args.widen)
    scale = np.sqrt(np.diag(prior.covariance))
    shape = (f"the aggregate posterior (each q(z|x) widened {prior.widen:g}x)" if args.aggregate
             else "a Gaussian" if prior.components == 1 else
             f"a mixture of {prior.components} Gaussians (weights "
             f"{prior.weights.min():.3f}-{prior.weights.max():.3f})")
    print(f"fitted {shape} to {prior.sequences} encodings of {prior.source}: |mean| "
          f"{np.linalg.norm(prior.mean):.2f}, per-dimension sd {scale.min():.2f}-{scale.max():.2f} "
          f"(N(0, I): 0, 1); sample from it with --prior fitted", file=sys.stderr)
    return 0


def cmd_encode(args) -> int:
    from seqvae import inference

    run = _load(args.run_dir)
    result = inference.encode_to_file(run, args.data, args.out, args.log_var, strict=args.strict,
                                      batch_size=args.batch_size, progress=_encode_progress())
    if result["skipped"]:
        kinds = ", ".join(f"{count} {_NAN_ROW_KINDS.get(kind, kind)}"
                          for kind, count in sorted(result["skipped_by_kind"].items()))
        print(f"seqvae: {result['skipped']} of {result['rows']} sequences could not be encoded, "
              f"their rows are NaN ({kinds}); first: {result['messages'][0]}; use --strict to "
              "fail instead", file=sys.stderr)
    print(f"wrote z means ({result['rows']}, {run.config.model.latent_dim}) to {args.out}"
          + (f", log variances to {args.log_var}" if args.log_var else "")
          + f" in {result['seconds']:.1f} s ({result['per_second']:.0f} mol/s)", file=sys.stderr)
    return 0


_NAN_ROW_KINDS = {"invalid": "invalid SMILES", "notation": "not convertible to the run's notation",
                  "unknown_token": "with a token not in the vocabulary",
                  "too_long": "longer than max_len"}


def _encode_progress():
    """A progress bar on a terminal, else a line per million sequences read."""
    if sys.stderr.isatty():
        import contextlib

        import keras

        bar = keras.utils.Progbar(None, stateful_metrics=("mol/s",), unit_name="line")

        def show(read: int, total: int, rate: float) -> None:
            bar.target = total
            with contextlib.redirect_stdout(sys.stderr):  # Progbar writes to stdout
                bar.update(read, [("mol/s", rate)], finalize=read >= total)
        return show
    state = {"next": 1_000_000}

    def log(read: int, total: int, rate: float) -> None:
        if read >= state["next"]:
            state["next"] += 1_000_000
            print(f"seqvae encode: {read}/{total} lines, {rate:.0f} mol/s", file=sys.stderr,
                  flush=True)
    return log


def cmd_decode(args) -> int:
    import numpy as np

    from seqvae import inference
    from seqvae.errors import SeqvaeError

    _check_sampling(args)
    run = _load(args.run_dir, raw=args.raw)
    if not os.path.exists(args.z):
        raise SeqvaeError(f"{args.z}: no such file")
    try:
        z = np.load(args.z, allow_pickle=False)
    except (ValueError, OSError) as error:
        raise SeqvaeError(f"{args.z}: not a readable .npy array ({str(error).splitlines()[0]})") from None
    if z.ndim != 2 or not np.issubdtype(z.dtype, np.floating):
        raise SeqvaeError(f"{args.z}: expected float array (N, {run.config.model.latent_dim}), "
                          f"got {z.dtype} {z.shape}")
    if not np.all(np.isfinite(z)):
        row = int(np.argwhere(~np.isfinite(z))[0][0])
        raise SeqvaeError(f"{args.z}: row {row + 1} holds NaN or infinite values")
    texts = inference.decode(run, z, greedy=not args.sample, temperature=args.temperature,
                             top_k=args.top_k, seed=args.seed, grammar=not args.no_grammar,
                             beam_width=args.beam)
    _write_lines(texts, args.out, run)
    return 0


def cmd_reconstruct(args) -> int:
    from seqvae import inference

    run = _load(args.run_dir)
    data = args.data
    if args.limit:  # drawn at random: a file in some order (MOSES's) is not described by its head
        from seqvae.data.sources import random_subset, read_sequences

        data = random_subset(read_sequences(data, run.config.data.column), args.limit,
                             seed=args.seed).texts
    result = inference.reconstruct(run, data, num_samples=args.samples, seed=args.seed,
                                   strict=args.strict, grammar=not args.no_grammar,
                                   beam_width=args.beam)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"sequences: {result['sequences']}")
        print(f"{result['decoding']} from mean z:  exact reconstruction "
              f"{result['exact_match_mean_z']:.4f}"
              + (" (same canonical SMILES)" if run.codec.molecules else ""))
        print(f"{result['decoding']} from mean z:  token accuracy "
              f"{result['token_accuracy_mean_z']:.4f}  "
              f"sequence accuracy {result['sequence_accuracy_mean_z']:.4f}")
        if result["samples_per_sequence"]:
            print(f"{result['decoding']} from z~q(z|x) (x{result['samples_per_sequence']}): "
                  f"token accuracy {result['token_accuracy_sampled_z']:.4f}  sequence accuracy "
                  f"{result['sequence_accuracy_sampled_z']:.4f}")
    return 0


def cmd_evaluate(args) -> int:
    from seqvae.evaluation.evaluate import evaluate, print_to_stderr
    from seqvae.evaluation.report import format_table

    results = evaluate(args.run_dir, n_samples=args.n, test=args.test,
                       test_scaffolds=args.test_scaffolds, train=args.train,
                       include_fcd=not args.no_fcd, iw_samples=args.iw_samples,
                       recon_molecules=args.recon_molecules,
                       quality_sequences=args.quality_sequences, seed=args.seed,
                       grammar=not args.no_grammar, prior=args.prior, rejection=args.rejection,
                       progress=None if args.quiet else print_to_stderr)
    if args.json:
        with open(os.path.join(results["report_dir"], "metrics.json")) as handle:
            sys.stdout.write(handle.read() + "\n")
    else:
        print(format_table(results), end="")
    return 0


def cmd_interpolate(args) -> int:
    from seqvae import inference

    run = _load(args.run_dir, raw=args.raw)
    path = inference.interpolate(run, args.a, args.b, steps=args.steps, slerp=args.slerp,
                                 grammar=not args.no_grammar, beam_width=args.beam)
    for t, text in path:
        print(f"{t:.3f}\t{text}")
    from seqvae.evaluation.reconstruction import path_counts

    counts = path_counts(run, [(args.a, args.b)], [path])
    ends_line = f"ends decoded back to themselves: {counts['ends_back']}/2"
    if run.codec.molecules:
        print(f"intermediates: {counts['valid']}/{counts['inner']} valid, {counts['distinct']} "
              f"distinct molecules; {ends_line}", file=sys.stderr)
    else:
        print(ends_line, file=sys.stderr)
    return 0


def cmd_export(args) -> int:
    from seqvae.export import export

    print(f"wrote SavedModel (signatures encode, decode, sample) to {export(args.run_dir, args.out)}")
    return 0


def cmd_doctor(args) -> int:
    from seqvae.training import doctor

    precisions = ("float32", "mixed_bfloat16", "mixed_float16") if args.all_precisions else None
    if args.run_dir:
        run = _load(args.run_dir)
        reports = doctor.doctor(run.config, run.vocab, run.info["tokenizer"],
                                max_len=min(run.max_len, 24), all_modes=not args.only_config,
                                precisions=precisions)
        from seqvae.training.property_fit import has_head, load_head

        if has_head(run) and not run.info.get("properties"):  # a joint head is in the VAE's check
            reports += doctor.check_head_gradients(load_head(run), run.config.model.latent_dim)
    else:
        reports = doctor.doctor(_build_config(args), all_modes=not args.only_config,
                                precisions=precisions)
    print(doctor.format_reports(reports))
    return 0 if all(r.ok for r in reports) else 1


def cmd_demo(args) -> int:
    """Train the demo configuration on the bundled data, then sample and score it."""
    from seqvae.workflows import run_demo

    run_demo(args.out, args.n, tuple(args.temperatures), seed=args.seed,
             grammar=not args.no_grammar, raw=args.raw, resume=args.resume,
             time_budget=args.time_budget, report=lambda line: print(line, flush=True))
    return 0


def cmd_fit_properties(args) -> int:
    from seqvae.training.property_fit import fit_properties, print_metrics

    info = fit_properties(args.run_dir, args.properties, data=args.data, limit=args.limit,
                          test=None if args.no_test else (args.test or "default"),
                          test_limit=args.test_limit, epochs=args.epochs, seed=args.seed,
                          depth=args.depth, width=args.width, learning_rate=args.learning_rate,
                          schedule=args.schedule, activation=args.activation,
                          progress=lambda line: print(f"seqvae fit-properties: {line}",
                                                      file=sys.stderr, flush=True))
    for note in info["notes"]:
        print(f"note: {note}", file=sys.stderr)
    print(f"property head fitted on {info['fit_molecules']} encodings of {info['fitted_on']}; "
          f"saved in {os.path.join(args.run_dir, 'property_head')}")
    if info["test"]:
        print(f"on {info['test_source']}:")
        print_metrics(info["test"])
    return 0


def cmd_predict(args) -> int:
    from seqvae.training.property_fit import load_head, predict

    run = _load(args.run_dir)
    head = load_head(run)
    texts, values = predict(run, args.data, head)
    lines = [",".join(("smiles",) + head.names)]
    lines += [",".join([text] + [f"{v:.4f}" for v in row]) for text, row in zip(texts, values)]
    _write_lines(lines, args.out)
    return 0


def cmd_optimize(args) -> int:
    from seqvae import optimize as opt
    from seqvae.data.sources import read_sequences
    from seqvae.files import write_text_atomic

    settings = opt.OptimizeSettings(
        similarity=args.similarity, steps=args.steps,  # unconstrained without --start
        restarts=args.restarts, step_size=args.step_size, trust_radius=args.trust_radius,
        samples=args.samples, temperature=args.temperature, beam=args.beam, rounds=args.rounds,
        elites=args.elites, keep=args.keep, minimize=args.minimize, grammar=not args.no_grammar,
        seed=args.seed)
    run = _load(args.run_dir, raw=args.raw)
    starts = None
    if args.start:
        starts = (read_sequences(args.start, run.config.data.column).texts
                  if os.path.exists(args.start) or args.start.startswith("moses:") else [args.start])
        if args.n and args.start.startswith("moses:"):
            starts = starts[:args.n]
    single = starts is not None and len(starts) == 1  # its path is printed
    found = opt.optimize(run, args.objective, starts, n=args.n, settings=settings,
                         keep_trajectory=bool(args.trajectory) or single,
                         progress=lambda line: print(f"seqvae optimize: {line}", file=sys.stderr,
                                                     flush=True))
    write_text_atomic(args.out, opt.results_csv(found.results))
    if args.trajectory:
        write_text_atomic(args.trajectory, opt.trajectory_csv(found.trajectory))
    summary = opt.summarize(found.results)
    print(f"{summary['starts']} starts: {summary['found']} with a molecule found, success "
          f"{100 * summary['success']:.1f}%, improvement {summary['improvement_mean']:.3f} "
          f"+- {summary['improvement_sd']:.3f} ({args.objective}); wrote {args.out}")
    if len(found.results) == 1:
        r = found.results[0]
        print(f"start {r.start} ({r.start_value:.3f}) -> {r.smiles or '(none)'} "
              f"({r.value:.3f}, similarity {r.similarity:.3f}, round {r.round} restart "
              f"{r.restart} step {r.step})")
        if single:
            print(f"greedy decodings along the paths ({args.objective}; every decoding in "
                  f"{args.trajectory or '--trajectory FILE'}):")
            print("\n".join(opt.path_lines(found.trajectory)))
    return 0


def cmd_explore(args) -> int:
    from seqvae.explore.server import serve

    serve(args.run_dir, args.molecules, n=args.n, port=args.port, host=args.host,
          projection=args.projection)
    return 0


EXAMPLES = {
    "train": "seqvae train --out runs/demo\n  TF_CONFIG=... seqvae train data.smi --out runs/big --strategy multi-worker\n  seqvae train data.smi --out runs/mine --set model.latent_dim=64 --time-budget 15m\n  seqvae train --out runs/demo --resume\n  seqvae train 'shards/*.smi.gz' --stream --out runs/big",
    "sample": "seqvae sample runs/demo -n 1000 --temperature 0.8 --valid-only --out samples.smi",
    "fit-prior": "seqvae fit-prior runs/demo\n  seqvae sample runs/demo --prior fitted -n 1000",
    "encode": "seqvae encode runs/demo molecules.smi --out z.npy --log-var logvar.npy",
    "decode": "seqvae decode runs/demo z.npy --out decoded.smi",
    "reconstruct": "seqvae reconstruct runs/demo moses:test --samples 10 --json\n  seqvae reconstruct runs/demo moses:test --limit 1000 --samples 0 --beam 5",
    "evaluate": "seqvae evaluate runs/demo --no-fcd\n  seqvae evaluate runs/mine --test held_out.smi --train data.smi -n 10000",
    "interpolate": "seqvae interpolate runs/demo 'CCO' 'c1ccccc1O' --steps 8 --slerp",
    "doctor": "seqvae doctor\n  seqvae doctor runs/demo\n  seqvae doctor --all-precisions\n  seqvae doctor --set model.decoder_layers=1",
    "demo": "seqvae demo --out runs/demo",
    "export": "seqvae export runs/demo --out exported/seqvae/1",
    "fit-properties": "seqvae fit-properties runs/demo\n  seqvae fit-properties runs/mine --data assay.csv --properties logp,col:pIC50",
    "predict": "seqvae predict runs/demo molecules.smi --out predictions.csv",
    "optimize": "seqvae optimize runs/demo --objective plogp --start 'CCOc1ccccc1' --similarity 0.4 --out results.csv --trajectory path.csv\n  seqvae optimize runs/demo --objective qed -n 800 --out best.csv",
    "explore": "seqvae explore runs/demo\n  seqvae explore runs/mine --molecules mine.smi --n 2000 --port 8051",
}


def _add_config_options(p, with_stop: bool = True) -> None:
    p.add_argument("--config", help="TOML or JSON config file (sections model, data, train)")
    p.add_argument("--preset", choices=("demo", "moses", "moses_original", "user"),
                   help="base configuration when no --config is given: demo (the default on the "
                   "bundled MOSES data: a small model for 2 CPU cores, 320k molecules, 2,000 "
                   "steps), user (the default for your own DATA: the demo model, all lines, up "
                   "to 100 epochs with early stopping), moses (the MOSES VAE's architecture with "
                   "seqvae's latent recipe: hours, or a GPU) or moses_original (the MOSES VAE's "
                   "own setting)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field, e.g. model.latent_dim=64 (repeatable)")
    if with_stop:
        p.add_argument("--epochs", type=int)
        p.add_argument("--max-steps", type=int)
        p.add_argument("--time-budget", type=parse_duration, help="e.g. 15m, 900s, 1h")
        p.add_argument("--limit", type=int, help="use only N sequences: the first N, or N drawn "
                       "at random with --set data.subset=random (the demo preset's choice)")
        p.add_argument("--seed", type=int)


def _add_beam_option(p) -> None:
    p.add_argument("--beam", type=int, default=0, metavar="K",
                   help="beam search with K hypotheses (length-normalised) instead of greedy")


def _add_grammar_option(p) -> None:
    p.add_argument("--no-grammar", action="store_true",
                   help="decode SMILES without the grammar mask (on by default for SMILES runs; "
                   "it only allows tokens that keep the string a completable molecule)")


def _add_raw_option(p) -> None:
    p.add_argument("--raw", action="store_true",
                   help="molecules as the model writes them (Kekule SMILES for the demo) instead "
                   "of RDKit's canonical SMILES")


def _add_rejection_option(p) -> None:
    p.add_argument("--rejection", type=int, default=None, metavar="R",
                   help="SMILES runs: sample from the model conditioned on the grammar instead "
                   "of under its mask: a sample the grammar rejects is drawn again (new z) up "
                   "to R rounds, then masked (0: the mask; default: the run's "
                   "model.rejection_rounds, 8 for the demo; no effect on runs trained with the "
                   "constrained softmax, whose distribution is the masked one)")


def _add_prior_option(p) -> None:
    p.add_argument("--prior", choices=("standard", "fitted"), default=None,
                   help="z from N(0, I) (standard) or from the prior fitted to the run's "
                   "encodings (fitted: by `seqvae fit-prior`, or after training with "
                   "model.prior=aggregate, as the demo); default: the run's own (fitted for "
                   "model.prior=aggregate, else standard)")


def build_parser() -> argparse.ArgumentParser:
    from seqvae.config import EVALUATE_QUALITY_SEQUENCES, EVALUATE_RECON_MOLECULES

    parser = argparse.ArgumentParser(prog="seqvae", description=(
        "Variational autoencoders over token sequences (SMILES, SELFIES, proteins, text)."))
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name, func, help_text):
        p = sub.add_parser(name, help=help_text, description=help_text,
                           epilog="example:\n  " + EXAMPLES[name],
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(func=func)
        return p

    p = command("train", cmd_train, "train a VAE into a run directory")
    p.add_argument("data", nargs="?", help="data file or moses:train|test|test_scaffolds "
                   "(default: the bundled MOSES train split)")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--resume", action="store_true", help="continue the run in --out exactly")
    p.add_argument("--strict", action="store_true", help="fail on invalid SMILES instead of skipping")
    p.add_argument("--stream", action="store_true",
                   help="stream DATA (text files, glob patterns, .gz) through tf.data without "
                   "loading it (sets data.streaming=true)")
    p.add_argument("--strategy", choices=("default", "mirrored", "multi-worker"), default="default",
                   help="tf.distribute strategy; multi-worker reads TF_CONFIG (batch_size is global)")
    p.add_argument("--properties", help="train a property head on z jointly: logp, qed, sa, plogp, "
                   "mw or col:NAME (numeric CSV column), comma-separated (sets data.properties)")
    _add_config_options(p)

    p = command("demo", cmd_demo, "train the demo model on MOSES, sample 1,000 and score them")
    p.add_argument("--out", default="runs/demo")
    p.add_argument("-n", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.7],
                   help="sampling temperatures to score (default: 1.0 0.7)")
    p.add_argument("--time-budget", type=parse_duration,
                   help="stop training after this long (default: none; the demo trains 2,000 "
                   "steps, 10 to 30 minutes on 2 CPU cores)")
    _add_grammar_option(p)
    _add_raw_option(p)
    p.add_argument("--resume", action="store_true")

    p = command("sample", cmd_sample, "sample sequences from the prior")
    p.add_argument("run_dir")
    p.add_argument("-n", type=int, default=100)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--greedy", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="output file (default: stdout), one sequence per line")
    p.add_argument("--unique", action="store_true", help="drop repeated samples")
    p.add_argument("--valid-only", action="store_true", help="keep only RDKit-valid SMILES")
    _add_grammar_option(p)
    _add_raw_option(p)
    _add_prior_option(p)
    _add_rejection_option(p)

    p = command("fit-prior", cmd_fit_prior, "fit a Gaussian (or a mixture) to the run's "
                "aggregate posterior (ex-post density estimation), or keep that posterior "
                "(--aggregate), for sample/evaluate --prior fitted")
    p.add_argument("run_dir")
    p.add_argument("data", nargs="?", help="sequences to encode (default: the run's training "
                   "source)")
    p.add_argument("--limit", type=int, default=50_000,
                   help="N sequences drawn at random (0: all)")
    p.add_argument("--components", type=int, default=1,
                   help="Gaussians in the mixture (1: the moment-matched Gaussian; Ghosh et al. "
                   "2020 fit 10), fitted by EM")
    p.add_argument("--aggregate", action="store_true",
                   help="keep the aggregate posterior itself (the N encodings' q(z|x), each "
                   "widened by --widen) instead of fitting Gaussians to it")
    p.add_argument("--widen", type=float, default=None,
                   help="with --aggregate: factor on each posterior's standard deviation "
                   "(default: the run's model.prior_widen)")

    p = command("encode", cmd_encode, "encode sequences to latent means (N, latent_dim), "
                "streaming any number of lines")
    p.add_argument("run_dir")
    p.add_argument("data")
    p.add_argument("--out", required=True, help=".npy file for the means")
    p.add_argument("--log-var", help=".npy file for the log variances")
    p.add_argument("--strict", action="store_true",
                   help="fail on the first sequence that cannot be encoded (default: its row is "
                   "NaN, so rows stay aligned with the input's sequences)")
    p.add_argument("--batch-size", type=int, default=1000,
                   help="sequences per encoder call (input is streamed; default 1000)")

    p = command("decode", cmd_decode, "decode latent vectors from a .npy file")
    p.add_argument("run_dir")
    p.add_argument("z")
    p.add_argument("--out")
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    _add_beam_option(p)
    _add_grammar_option(p)
    _add_raw_option(p)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)

    p = command("reconstruct", cmd_reconstruct, "reconstruction accuracy on sequences")
    p.add_argument("run_dir")
    p.add_argument("data")
    p.add_argument("--samples", type=int, default=10, help="z draws per sequence")
    p.add_argument("--limit", type=int, default=0,
                   help="N sequences drawn at random with --seed (0: all); `--limit 1000` on "
                   "moses:test is the demo's draw")
    _add_beam_option(p)
    _add_grammar_option(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.add_argument("--strict", action="store_true")

    p = command("evaluate", cmd_evaluate, "sample and score a run (MOSES metrics, ELBO, IW-NLL, "
                "active units, MI, reconstruction) and write RUN_DIR/report/")
    p.add_argument("run_dir")
    p.add_argument("-n", type=int, default=30000,
                   help="molecules sampled from the prior (default: 30000, as MOSES)")
    p.add_argument("--test", help="held-out SMILES: a file or moses:SPLIT "
                   "(default: moses:test for runs trained on MOSES, else none)")
    p.add_argument("--test-scaffolds", help="scaffold-split test set "
                   "(default: moses:test_scaffolds for MOSES runs)")
    p.add_argument("--train", help="training set for Novelty (default: moses:train for MOSES runs)")
    p.add_argument("--no-fcd", action="store_true", help="skip FCD (it needs torch and fcd)")
    p.add_argument("--iw-samples", type=int, default=10,
                   help="samples per sequence of the importance-weighted NLL bound")
    p.add_argument("--recon-molecules", type=int, default=EVALUATE_RECON_MOLECULES,
                   help="test molecules in the reconstruction protocol, 10 encodings x 10 "
                        "decodings each (default %(default)s; 0 skips it)")
    p.add_argument("--quality-sequences", type=int, default=EVALUATE_QUALITY_SEQUENCES,
                   help="test sequences for ELBO, IW-NLL, active units and MI (default "
                        "%(default)s; 0 skips them)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print metrics.json instead of the table")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    _add_grammar_option(p)
    _add_prior_option(p)
    _add_rejection_option(p)

    p = command("interpolate", cmd_interpolate, "decode the path between two sequences")
    p.add_argument("run_dir")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--slerp", action="store_true", help="spherical instead of linear")
    _add_beam_option(p)
    _add_grammar_option(p)
    _add_raw_option(p)

    p = command("export", cmd_export, "write a SavedModel that serves without seqvae "
                "(encode, decode and sample signatures, tokenization in the graph)")
    p.add_argument("run_dir")
    p.add_argument("--out", required=True, help="SavedModel directory")

    p = command("doctor", cmd_doctor, "check that every trainable weight gets a gradient")
    p.add_argument("run_dir", nargs="?")
    p.add_argument("--only-config", action="store_true",
                   help="check only the config's own decoder mode and conditioning")
    p.add_argument("--all-precisions", action="store_true",
                   help="also check mixed_bfloat16 and mixed_float16 (default: the config's precision)")
    _add_config_options(p, with_stop=False)

    p = command("fit-properties", cmd_fit_properties, "fit a property head on a trained run's "
                "encodings (saved in RUN_DIR/property_head/) and report R2/MAE on the test split")
    p.add_argument("run_dir")
    p.add_argument("--properties", default="logp,qed,sa,plogp,mw",
                   help="comma-separated: logp, qed, sa, plogp (penalized logP), mw, or col:NAME "
                   "for a numeric column of a CSV --data (default: logp,qed,sa,plogp,mw)")
    p.add_argument("--data", help="molecules to fit on (default: the run's training data)")
    p.add_argument("--limit", type=int, default=50000,
                   help="fit on the first N molecules (default: 50000; 0 = all)")
    p.add_argument("--test", help="molecules for R2/MAE (default: moses:test for MOSES runs)")
    p.add_argument("--test-limit", type=int, default=10000)
    p.add_argument("--no-test", action="store_true", help="skip the R2/MAE report")
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--learning-rate", type=float, default=1e-3,
                   help="Adam's, at the start (default 1e-3)")
    p.add_argument("--schedule", default="cosine",
                   help="cosine (decayed to 1%% of --learning-rate by the last epoch; the "
                   "default) or constant")
    p.add_argument("--activation", default="silu",
                   help="of the hidden layers: silu (the default), tanh (the chemical VAE's), "
                   "gelu or relu")
    p.add_argument("--depth", type=int, help="hidden layers of the head (default: the run's "
                   "model.property_head_depth, 3)")
    p.add_argument("--width", type=int, help="units per hidden layer (default: the run's "
                   "model.property_head_width, 67; wider predicts better, bench/optimize.md)")
    p.add_argument("--seed", type=int, default=0)

    p = command("predict", cmd_predict, "predict properties of molecules with the run's head")
    p.add_argument("run_dir")
    p.add_argument("data", help="molecules: .smi, .csv or moses:SPLIT")
    p.add_argument("--out", help="CSV file (default: stdout)")

    p = command("optimize", cmd_optimize, "find molecules with a better property near given ones "
                "(gradient ascent on z through the property head, RDKit re-scoring)")
    p.add_argument("run_dir")
    p.add_argument("--objective", required=True,
                   help="a property of the head that RDKit computes: logp, qed, sa, plogp, mw")
    p.add_argument("--minimize", action="store_true", help="search for lower values (e.g. sa)")
    p.add_argument("--start", help="a SMILES, a file of them or moses:SPLIT (default: "
                   "unconstrained search from prior samples)")
    p.add_argument("--similarity", type=float, default=0.4,
                   help="min Tanimoto similarity to the start (Morgan r2, 2048 bits)")
    # OptimizeSettings's defaults (tests/test_cli_properties.py keeps them equal; importing
    # seqvae.optimize here would load TensorFlow for every command's --help)
    p.add_argument("--steps", type=int, default=5, help="gradient steps per path")
    p.add_argument("--restarts", type=int, default=2, help="paths per start and round")
    p.add_argument("--step-size", type=float, default=0.25)
    p.add_argument("--trust-radius", type=float, default=2.0,
                   help="max distance in z from where a path begins")
    p.add_argument("--samples", type=int, default=2,
                   help="sampled decodings per point besides the greedy one")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--beam", type=int, default=0,
                   help="also every hypothesis of a beam search this wide from each path's "
                   "first point (default 0: none)")
    p.add_argument("--keep", type=parse_fractions, default=(0.7,), metavar="F[,F...]",
                   help="also decode every point with these fractions of the start's tokens "
                   "forced as a prefix, the decoder completing them from z (default 0.7; "
                   "'' for none)")
    p.add_argument("--rounds", type=int, default=3,
                   help="searches; each later one climbs from the best molecules found so far")
    p.add_argument("--elites", type=int, default=2,
                   help="molecules per start a later round climbs from")
    p.add_argument("-n", "--n", type=int, default=800,
                   help="prior samples without --start; the first N of a moses:SPLIT start")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="results CSV (one row per start)")
    p.add_argument("--trajectory", help="CSV of every decoded point of every path")
    _add_grammar_option(p)
    _add_raw_option(p)
    p = command("explore", cmd_explore, "explore the latent space in the browser: map, click to "
                "decode, neighbours, interpolation, samples (needs seqvae[explore])")
    p.add_argument("run_dir")
    p.add_argument("--molecules", default="moses:test",
                   help="molecules to map: a file or moses:SPLIT (default: moses:test)")
    p.add_argument("--n", type=int, default=5000, help="map the first N molecules (default 5000)")
    p.add_argument("--projection", choices=("pca", "umap"), default="pca",
                   help="pca (default) or umap (needs umap-learn); cached in RUN_DIR/explore/")
    p.add_argument("--port", type=int, default=8050)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    return parser


class _Terminated(Exception):
    """SIGTERM, raised where the command is: it unwinds like Ctrl-C (temporary files removed)."""


def _on_sigterm(*_) -> None:
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _quiet_tensorflow()
    from seqvae.errors import SeqvaeError

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)  # train: a checkpoint, then stop
    try:
        return args.func(args)
    except SeqvaeError as error:
        print(f"seqvae: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("seqvae: interrupted", file=sys.stderr)
        return 130
    except _Terminated:
        print("seqvae: terminated", file=sys.stderr)
        return 143
    except BrokenPipeError:
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
