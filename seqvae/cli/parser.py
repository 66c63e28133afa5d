"""The command line's argument parser: every command, its options and an example of each."""

from __future__ import annotations

import argparse
import re

from seqvae.cli.train_commands import (cmd_demo, cmd_doctor, cmd_export, cmd_finetune,
                                       cmd_fit_prior, cmd_fit_properties, cmd_predict, cmd_train)
from seqvae.cli.use_commands import (cmd_decode, cmd_encode, cmd_evaluate, cmd_explore,
                                     cmd_interpolate, cmd_optimize, cmd_pretrained,
                                     cmd_reconstruct, cmd_sample)


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


EXAMPLES = {
    "train": "seqvae train --out runs/demo\n  TF_CONFIG=... seqvae train data.smi --out runs/big --strategy multi-worker\n  seqvae train data.smi --out runs/mine --set model.latent_dim=64 --time-budget 15m\n  seqvae train --out runs/demo --resume\n  seqvae train 'shards/*.smi.gz' --stream --out runs/big",
    "sample": "seqvae sample runs/demo -n 1000 --temperature 0.8 --valid-only --out samples.smi\n  seqvae sample runs/demo -n 100 --where 'logp=2.5+-0.5' --where 'qed>=0.7'\n  seqvae sample runs/demo -n 100 --scaffold 'c1ccc2ncccc2c1' --out decorated.csv",
    "fit-prior": "seqvae fit-prior runs/demo\n  seqvae sample runs/demo --prior fitted -n 1000",
    "encode": "seqvae encode runs/demo molecules.smi --out z.npy --log-var logvar.npy",
    "decode": "seqvae decode runs/demo z.npy --out decoded.smi",
    "reconstruct": "seqvae reconstruct runs/demo moses:test --samples 10 --json\n  seqvae reconstruct runs/demo moses:test --limit 1000 --samples 0 --beam 5",
    "evaluate": "seqvae evaluate runs/demo --no-fcd\n  seqvae evaluate runs/mine --test held_out.smi --train data.smi -n 10000",
    "interpolate": "seqvae interpolate runs/demo 'CCO' 'c1ccccc1O' --steps 8 --slerp",
    "doctor": "seqvae doctor\n  seqvae doctor runs/demo\n  seqvae doctor --all-precisions\n  seqvae doctor --set model.decoder_layers=1",
    "demo": "seqvae demo --out runs/demo",
    "finetune": "seqvae finetune runs/demo mine.smi --out runs/mine\n  seqvae finetune runs/demo drugs.csv --column smiles --extend-vocab --out runs/drugs",
    "export": "seqvae export runs/demo --out exported/seqvae/1",
    "fit-properties": "seqvae fit-properties runs/demo\n  seqvae fit-properties runs/mine --data assay.csv --properties logp,col:pIC50",
    "predict": "seqvae predict runs/demo molecules.smi --out predictions.csv",
    "optimize": "seqvae optimize runs/demo --objective plogp --start 'CCOc1ccccc1' --similarity 0.4 --out results.csv --trajectory path.csv\n  seqvae optimize runs/demo --objective qed -n 800 --out best.csv",
    "explore": "seqvae explore runs/demo\n  seqvae explore runs/mine --molecules mine.smi --n 2000 --port 8051",
    "pretrained": "seqvae pretrained\n  seqvae pretrained moses\n  seqvae sample pretrained:moses -n 1000",
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
        "Variational autoencoders over token sequences (SMILES, SELFIES, proteins, text). "
        "Wherever a command takes a run directory, pretrained:NAME names a model that ships "
        "with seqvae (seqvae pretrained lists them)."))
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
    p.add_argument("--init", metavar="RUN", help="start from RUN's weights (a run directory or "
                   "pretrained:NAME), with its vocabulary and, unless --preset or --config is "
                   "given, its config (then --set and the flags); its model must stay RUN's")
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

    p = command("finetune", cmd_finetune, "fine-tune a trained run on your own molecules "
                "(transfer learning): salts stripped, a share held out for early stopping, the "
                "prior refitted to them, a before/after report")
    p.add_argument("base", help="the trained run directory to start from")
    p.add_argument("data", help="your molecules: .smi (one a line), .csv/.tsv (--column) or "
                   "moses:SPLIT")
    p.add_argument("--out", required=True, help="the new run directory")
    p.add_argument("--extend-vocab", action="store_true",
                   help="add the tokens BASE cannot write (charges, stereo, P, I, metals, ring "
                   "labels) and a longer max_len, instead of leaving those molecules out")
    p.add_argument("--max-len", type=int, help="with --extend-vocab: the longest molecule in "
                   "tokens the new run writes (default: the data's longest)")
    p.add_argument("--holdout", type=float, help="share held out for early stopping and the "
                   "report (default 0.1)")
    p.add_argument("--epochs", type=int, help="passes over the data (default 20; at least "
                   "--min-steps steps, at most --max-steps)")
    p.add_argument("--min-steps", type=int, help="default 300")
    p.add_argument("--max-steps", type=int, help="default 1000 (0: no cap)")
    p.add_argument("--learning-rate", type=float, help="Adam's, cosine-decayed to a tenth "
                   "(default 1e-3)")
    p.add_argument("--batch-size", type=int, help="default 64")
    p.add_argument("--patience", type=int, help="epochs without a better held-out loss before "
                   "stopping (default 5); the best epoch's weights are kept")
    p.add_argument("--keep-salts", action="store_true",
                   help="do not cut molecules to their largest fragment")
    p.add_argument("--column", help="the SMILES column of a CSV (default: BASE's, SMILES; a "
                   "column named so in another case is found too)")
    p.add_argument("--seed", type=int, help="default 0")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a field of the fine-tuning's config, e.g. "
                   "model.prior_widen=1.8 (repeatable)")
    p.add_argument("-n", type=int, default=1000,
                   help="molecules sampled from BASE and from the new run for the before/after "
                   "report (default 1000; 0: no report)")
    p.add_argument("--no-fcd", action="store_true", help="no FCD in the report")
    p.add_argument("--resume", action="store_true", help="continue an interrupted fine-tuning")

    p = command("sample", cmd_sample, "sample sequences from the prior, or n distinct molecules "
                "that meet property conditions (--where) and hold a scaffold (--scaffold), each "
                "checked by RDKit")
    p.add_argument("run_dir")
    p.add_argument("-n", type=int, default=100)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--greedy", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="output file (default: stdout), one sequence per line; with "
                   "--where/--scaffold a .csv gets each molecule's checked values too")
    p.add_argument("--unique", action="store_true", help="drop repeated samples")
    p.add_argument("--valid-only", action="store_true", help="keep only RDKit-valid SMILES")
    p.add_argument("--where", action="append", metavar="CONDITION",
                   help="a property every molecule must meet, checked by RDKit: logp, qed, sa, "
                   "plogp, mw, or col:NAME (a column the property head was fitted on: its "
                   "prediction), as 'logp=2.5+-0.5' (or ±), 'logp=2..3', 'qed>=0.7', 'sa<4' "
                   "(repeatable: all must hold). The molecules are distinct and valid")
    p.add_argument("--scaffold", metavar="SMILES_OR_SMARTS",
                   help="a substructure every molecule must hold (RDKit HasSubstructMatch), "
                   "decorated by the decoder")
    p.add_argument("--max-draws", type=int, metavar="D",
                   help="with --where/--scaffold: stop after decoding D molecules (default "
                   "100 n + 10,000)")
    p.add_argument("--time-budget", type=parse_duration, metavar="T",
                   help="with --where/--scaffold: stop after T (90s, 2m); the molecules found by "
                   "then are written, and the reason said")
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
    p.add_argument("--out", help="report folder (default: RUN_DIR/report)")
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

    p = command("pretrained", cmd_pretrained, "list the models that ship with seqvae (use one "
                "as pretrained:NAME wherever a run directory is taken): the data, size, "
                "metrics, and the command, CPU and time that trained each")
    p.add_argument("name", nargs="?", help="show this one in full (files, checksums, where "
                   "what is written for it goes)")
    return parser
