"""The command line's commands that use a trained run: sample, encode, decode, reconstruct,
evaluate, interpolate, optimize, explore and the list of pretrained models, and what they share
(loading a run, writing lines, checking sampling settings)."""

from __future__ import annotations

import json
import os
import sys

from seqvae.data.moses import is_moses


def load_run_for(run_dir: str, raw: bool = False):
    """The run, its molecules written as the model writes them with ``raw`` (``--raw``)."""
    from seqvae.run import load_run

    run = load_run(run_dir)
    run.raw_output = raw
    return run


def write_lines(lines, out: str | None, run=None) -> None:
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


def check_sampling(args) -> None:
    from seqvae.errors import SeqvaeError

    from seqvae.model.decoding import check_sampling as check

    if getattr(args, "n", 1) < 0:
        raise SeqvaeError(f"-n must be >= 0, got {args.n}")
    check(args.temperature, args.top_k)  # before the run is loaded
    if getattr(args, "rejection", None) and getattr(args, "no_grammar", False):
        raise SeqvaeError("rejection sampling works under the grammar: drop --no-grammar, or "
                          "use --rejection 0")


def cmd_sample(args) -> int:
    from seqvae import inference

    check_sampling(args)

    run = load_run_for(args.run_dir, raw=args.raw)
    if args.where or args.scaffold is not None:
        return _sample_where(args, run)
    if args.max_draws is not None or args.time_budget is not None:
        from seqvae.errors import SeqvaeError

        raise SeqvaeError("--max-draws and --time-budget bound a search: use them with --where "
                          "or --scaffold")
    texts = inference.sample(run, args.n, temperature=args.temperature, top_k=args.top_k,
                             greedy=args.greedy, seed=args.seed, grammar=not args.no_grammar,
                             prior=args.prior, rejection=args.rejection)
    if args.valid_only:
        from seqvae.data.chemistry import canonical_smiles

        texts = [t for t in texts if canonical_smiles(t) is not None]
    if args.unique:
        texts = list(dict.fromkeys(texts))
    write_lines(texts, args.out, run)
    return 0


def _sample_where(args, run) -> int:
    """``sample --where/--scaffold``: the search, its molecules written, its summary on stderr."""
    from seqvae.conditional import sample_where
    from seqvae.files import write_text_atomic

    found = sample_where(run, args.n, args.where or (), args.scaffold,
                         temperature=args.temperature, top_k=args.top_k, greedy=args.greedy,
                         seed=args.seed, max_draws=args.max_draws, time_budget=args.time_budget,
                         grammar=not args.no_grammar, prior=args.prior, rejection=args.rejection,
                         progress=_search_progress())
    if args.out and args.out.endswith(".csv"):
        write_text_atomic(args.out, found.csv())
    else:
        write_lines(found.molecules, args.out, run)
    if sys.stderr.isatty():  # clear the progress line
        print("\r\033[K", end="", file=sys.stderr)
    print(f"seqvae sample: {found.summary()}", file=sys.stderr)
    return 0


def _search_progress():
    """A line per batch of the search on a terminal (rewritten in place), else nothing."""
    if not sys.stderr.isatty():
        return None
    return lambda line: print(f"\rseqvae sample: {line}\033[K", end="", file=sys.stderr,
                              flush=True)


def cmd_encode(args) -> int:
    from seqvae import inference

    run = load_run_for(args.run_dir)
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

    check_sampling(args)
    run = load_run_for(args.run_dir, raw=args.raw)
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
    write_lines(texts, args.out, run)
    return 0


def cmd_reconstruct(args) -> int:
    from seqvae import inference

    run = load_run_for(args.run_dir)
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
                       progress=None if args.quiet else print_to_stderr, report_dir=args.out)
    if args.json:
        with open(os.path.join(results["report_dir"], "metrics.json")) as handle:
            sys.stdout.write(handle.read() + "\n")
    else:
        print(format_table(results), end="")
    return 0


def cmd_interpolate(args) -> int:
    from seqvae import inference

    run = load_run_for(args.run_dir, raw=args.raw)
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
    run = load_run_for(args.run_dir, raw=args.raw)
    starts = None
    if args.start:
        starts = (read_sequences(args.start, run.config.data.column).texts
                  if os.path.exists(args.start) or is_moses(args.start) else [args.start])
        if args.n and is_moses(args.start):
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


def cmd_pretrained(args) -> int:
    from seqvae import pretrained

    if args.name:
        print("\n".join(pretrained.detail_lines(pretrained.find(args.name))))
        return 0
    shipped = pretrained.available()
    if not shipped:
        print(f"no pretrained model ships with this installation of seqvae "
              f"({pretrained.root()} holds none)")
        return 0
    for entry in shipped:
        print("\n".join(pretrained.summary_lines(entry)))
    return 0
