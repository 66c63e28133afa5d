"""The command line's training-side commands: train, demo, doctor, fit-prior, fit-properties,
predict and export, each parsing nothing and calling the library."""

from __future__ import annotations

import os
import sys

from seqvae.cli.use_commands import load_run_for, write_lines
from seqvae.data.moses import is_moses


def _build_config(args, stored=None):
    """The config the arguments describe: ``--config`` or ``--preset`` (default demo, or the
    stored run's config when resuming without either), then ``--set`` and the flags."""
    from seqvae.config import load_config
    from seqvae.presets import preset_config

    if args.config:
        config = load_config(args.config)
    elif args.preset or stored is None:
        own_data = getattr(args, "data", None) and not is_moses(args.data)
        config = preset_config(args.preset or ("user" if own_data else "demo"))
    else:
        config = stored
    overrides = list(args.set or [])
    if getattr(args, "stream", False):
        overrides.append("data.streaming=true")
    if getattr(args, "max_steps", None) and getattr(args, "epochs", None) is None:
        overrides.append("train.epochs=0")  # --max-steps alone: this many steps, any epochs
    for flag, key in (("epochs", "train.epochs"), ("max_steps", "train.max_steps"),
                      ("time_budget", "train.time_budget"), ("limit", "data.limit"),
                      ("seed", "train.seed"), ("properties", "data.properties")):
        value = getattr(args, flag, None)
        if value is not None:
            overrides.append(f"{key}={value}")
    return config.with_overrides(overrides)


def cmd_train(args) -> int:
    from seqvae.errors import SeqvaeError
    from seqvae.workflows import train

    if not args.resume and os.path.exists(os.path.join(args.out, "run.json")):
        raise SeqvaeError(f"{args.out}: already holds a run; add --resume to continue it or "
                          "choose another --out")

    stored = None
    if args.resume and os.path.exists(os.path.join(args.out, "run.json")):  # else: starts it
        from seqvae.run import read_run_files

        stored = read_run_files(args.out).config
    codec = init = None
    if args.init:
        from seqvae import warm_start

        config = _build_config(args, stored or warm_start.base_config(args.init))
        codec, init = warm_start.warm_start(args.init, config, args.out)
    else:
        config = _build_config(args, stored)  # train() refuses settings that differ from the run's
    summary = train(config, args.out, args.data, resume=args.resume, strict=args.strict,
                    strategy=args.strategy, codec=codec, init=init)
    if not summary.get("already_finished"):
        _print_train_summary(summary)
    print(f"weights checksum {summary['weights_checksum']}")
    return 0


def _print_train_summary(summary: dict) -> None:
    from seqvae.workflows import train_summary_lines

    print("\n".join(train_summary_lines(summary)))


def cmd_finetune(args) -> int:
    from seqvae.finetune import FinetuneSettings, compare_with_base, finetune

    given = {name: getattr(args, name) for name in (
        "holdout", "epochs", "min_steps", "max_steps", "learning_rate", "batch_size", "patience",
        "max_len", "column", "seed") if getattr(args, name) is not None}
    settings = FinetuneSettings(**given, extend_vocab=args.extend_vocab,
                                strip=not args.keep_salts, overrides=tuple(args.set or ()))
    result = finetune(args.base, args.data, args.out, settings, resume=args.resume,
                      report=lambda line: print(line, file=sys.stderr, flush=True))
    summary = result["summary"]
    if not summary.get("already_finished"):
        _print_train_summary(summary)
    if summary.get("weights_of_step") is not None:
        print(f"kept the weights of step {summary['weights_of_step']}, the best held-out loss")
    if summary["stop_reason"] != "interrupted" and args.n:
        from seqvae.evaluation.comparison import format_comparison

        comparison = compare_with_base(args.out, n=args.n, seed=settings.seed,
                                       include_fcd=not args.no_fcd,
                                       progress=lambda line: print(f"seqvae finetune: {line}",
                                                                   file=sys.stderr, flush=True))
        print(format_comparison(comparison), end="")
    print(f"fine-tuned run: {args.out} (seqvae sample {args.out} -n 100; "
          f"seqvae evaluate {args.out})")
    return 0


def cmd_fit_prior(args) -> int:
    import numpy as np

    from seqvae import inference
    from seqvae.errors import SeqvaeError

    run = load_run_for(args.run_dir)
    run.check_writable("seqvae fit-prior")  # a model that ships with seqvae: before the data
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


def cmd_export(args) -> int:
    from seqvae.export import export

    print(f"wrote SavedModel (signatures encode, decode, sample) to {export(args.run_dir, args.out)}")
    return 0


def cmd_doctor(args) -> int:
    from seqvae.training import doctor

    precisions = ("float32", "mixed_bfloat16", "mixed_float16") if args.all_precisions else None
    if args.run_dir:
        run = load_run_for(args.run_dir)
        reports = doctor.doctor(run.config, run.vocab, run.info["tokenizer"],
                                max_len=min(run.max_len, 24), all_modes=not args.only_config,
                                precisions=precisions)
        from seqvae.property_fit import has_head, load_head

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
    from seqvae.property_fit import fit_properties, print_metrics

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
    from seqvae.property_fit import load_head, predict

    run = load_run_for(args.run_dir)
    head = load_head(run)
    texts, values = predict(run, args.data, head)
    lines = [",".join(("smiles",) + head.names)]
    lines += [",".join([text] + [f"{v:.4f}" for v in row]) for text, row in zip(texts, values)]
    write_lines(lines, args.out)
    return 0
