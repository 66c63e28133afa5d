"""Every command that README.md and docs/ show runs as written.

The commands are read from the documents' code blocks, so a new command in the docs is a new
case here. Each runs in a fresh folder holding tiny stand-ins for what the docs name: a run
made by ``seqvae demo`` for ``runs/demo`` (and any other ``runs/NAME`` a command reads), a few
molecule files, and ``z.npy``. The presets are shrunk (tiny models, a few steps) and the MOSES
splits are a few hundred of their molecules: what is checked is that each command, as a user
types it, runs to the end (exit 0) and gives output of the right shape, not the figures a
full-size run reaches.
"""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest
from test_pretrained import SHIP  # scripts/ship_pretrained.py, loaded once

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCUMENTS = ["README.md"] + sorted(
    os.path.relpath(os.path.join(folder, name), ROOT)
    for folder, _, names in os.walk(os.path.join(ROOT, "docs")) for name in names
    if name.endswith(".md"))
PROGRAMS = ("seqvae", ".venv/bin/seqvae")
SHELL_BLOCKS = ("bash", "sh", "shell", "console")  # the code blocks whose lines are commands
TINY_MOSES = {"train": 600, "test": 150, "test_scaffolds": 150}
# Files the documented commands read, made in each command's folder.
MOLECULES = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "CCOc1ccccc1", "CC(C)Cc1ccc(cc1)C(C)C(=O)O",
             "O=C(O)c1ccccc1", "CCN(CC)CC", "Clc1ccc(Br)cc1", "c1ccncc1", "CC(C)O"]
# ChEMBL approved drugs as a user's CSV has them: salts, stereo, charges (seqvae finetune).
DRUGS = ["Br.CC(N)Cc1ccc(O)cc1", "Br.CC(NC(C)(C)C)C(=O)c1cccc(Cl)c1", "C#CCN(C)[C@H](C)Cc1ccccc1.Cl",
         "Br.Cc1ccc(Sc2ccccc2N2CCNCC2)c(C)c1", "Br.Oc1ccc(C(O)C2CCCCN2)cc1O",
         "Brc1c(NC2=NCCN2)ccc2nccnc12", "C#CCN[C@@H]1CCc2ccccc21.CS(=O)(=O)O",
         "CC(=O)Nc1ccc(O)cc1", "CC(C)Cc1ccc(cc1)C(C)C(=O)O", "CN1CCC[C@H]1c1cccnc1",
         "O=[N+]([O-])c1ccc(O)cc1", "CC(=O)Oc1ccccc1C(=O)O"]
# pretrained:moses in the commands: the demo stand-in, shipped into this folder of the stand-ins
# ($SEQVAE_PRETRAINED_DIR).
PRETRAINED_ROOT = "runs/_pretrained"
OPTIONAL_PACKAGES = {"umap": "umap-learn"}  # a command whose comment names the package needs it


def documented_commands() -> list[tuple[str, int, list[str], str]]:
    """``(document, line, argv, comment)`` of each seqvae command in a code block of the docs:
    continuation lines joined, ``&&`` chains split, set-up steps left out; a command shown on
    several pages is run once, where it first appears."""
    found, seen = [], set()
    for document in DOCUMENTS:
        with open(os.path.join(ROOT, document), encoding="utf-8") as handle:
            lines = handle.read().split("\n")
        in_block, shell, pending, start = False, False, "", 0
        for number, line in enumerate(lines, start=1):
            if line.lstrip().startswith("```"):
                in_block, pending = not in_block, ""
                tag = line.strip()[3:]
                shell = tag in SHELL_BLOCKS or not tag
                continue
            if not in_block or not shell:
                continue
            if not pending:
                start = number
            pending += line.rstrip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            text, pending = pending.strip(), ""
            comment = text.split(" #", 1)[1] if " #" in text else ""
            for part in text.split("&&"):
                try:
                    words = shlex.split(part, comments=True)
                except ValueError:  # an untagged block of output, not of commands
                    if tag:
                        raise
                    continue
                if words and (words[0] in PROGRAMS or words[:3] == ["python", "-m", "seqvae"]
                              or (words[0] == "python" and len(words) > 1
                                  and words[1].startswith("examples/"))):
                    if tuple(words) not in seen:
                        seen.add(tuple(words))
                        found.append((document, start, words, comment))
    return found


COMMANDS = documented_commands()
# README.md's commands run here, docs/'s in tests/test_documented_docs_commands.py: two files,
# so that pytest-xdist gives them a worker each.
README_COMMANDS = [c for c in COMMANDS if c[0] == "README.md"]
DOCS_COMMANDS = [c for c in COMMANDS if c[0] != "README.md"]


def _tiny(config):
    """A preset shrunk to seconds: tiny layers, a few hundred molecules, six steps; its recipe
    (grammar features, Kekule SMILES, the aggregate prior, rejection) kept."""
    model = dataclasses.replace(config.model, encoder_units=16, decoder_units=16, latent_dim=4,
                                decoder_layers=min(config.model.decoder_layers, 2),
                                prior_encodings=200, property_head_width=8)
    data = dataclasses.replace(config.data, limit=min(config.data.limit or 400, 400))
    train = dataclasses.replace(config.train, batch_size=32, max_steps=6, epochs=1000,
                                warmup_steps=1, kl_anneal_steps=3, log_every=2,
                                checkpoint_every=3, patience=0)
    return dataclasses.replace(config, model=model, data=data, train=train)


def _tiny_moses(folder) -> dict[str, str]:
    """Gzipped CSVs of a few hundred molecules drawn at random from each MOSES split."""
    from seqvae.data.moses import read_split

    paths = {}
    for split, count in TINY_MOSES.items():
        texts, _ = read_split(split)
        rows = np.random.default_rng(0).choice(len(texts), count, replace=False)
        paths[split] = os.path.join(folder, f"{split}.csv.gz")
        with gzip.open(paths[split], "wt") as handle:
            handle.write("SMILES\n" + "".join(f"{texts[i]}\n" for i in sorted(rows)))
    return paths


@pytest.fixture(scope="module")
def shrunk(tmp_path_factory):
    """Tiny presets, six-step fine-tuning and MOSES splits for the whole module (undone at its
    end)."""
    from seqvae import finetune, presets, workflows
    from seqvae.data import moses, sources

    patch = pytest.MonkeyPatch()
    splits = _tiny_moses(str(tmp_path_factory.mktemp("moses")))
    patch.setattr(moses, "moses_split_file", lambda split: splits[split])
    patch.setattr(sources, "moses_split_file", lambda split: splits[split])
    real_preset, real_demo = presets.preset_config, presets.demo_config
    patch.setattr(presets, "preset_config", lambda name: _tiny(real_preset(name)))
    patch.setattr(presets, "demo_config", lambda: _tiny(real_demo()))
    real_steps = finetune.planned_steps

    def six_steps(*args):  # fine-tuning planned, then cut to the presets' six
        steps, per_epoch = real_steps(*args)
        return min(steps, 6), per_epoch

    patch.setattr(finetune, "planned_steps", six_steps)
    patch.setattr(workflows, "DEMO_HEAD_MOLECULES", 300)
    patch.setattr(workflows, "DEMO_HEAD_TEST", 50)
    yield splits
    patch.undo()


@pytest.fixture(scope="module")
def stand_ins(shrunk, tmp_path_factory):
    """A folder with ``runs/demo`` made by ``seqvae demo`` (shrunk), ``runs/onehot`` trained on
    one-hot data, the files the docs name, and the demo shipped as ``pretrained:moses``."""
    from seqvae import cli

    folder = tmp_path_factory.mktemp("stand-ins")
    assert cli.main(["demo", "--out", str(folder / "runs" / "demo"), "-n", "20"]) == 0
    for name in ("data.smi", "molecules.smi", "mine.smi"):
        (folder / name).write_text("".join(f"{m}\n" for m in MOLECULES * 3))
    (folder / "drugs.csv").write_text("smiles\n" + "".join(f"{m}\n" for m in DRUGS * 3))
    (folder / "proteins.txt").write_text("MKTAYIAKQRQISFVKSHFSRQ\nMVLSPADKTNVKAAWGKVGAHA\n" * 20)
    ids = np.random.default_rng(0).integers(0, 4, (256, 3))  # the seed question's data
    np.save(folder / "x.npy", np.eye(4, dtype=np.float32)[ids])
    (folder / "zinc").mkdir()
    with gzip.open(folder / "zinc" / "shard-0.smi.gz", "wt") as handle:
        handle.write("".join(f"{m}\n" for m in MOLECULES * 10))
    assert cli.main(["train", str(folder / "x.npy"), "--out", str(folder / "runs" / "onehot"),
                     "--set", "model.decoder_input=free_running"]) == 0
    assert cli.main(["encode", str(folder / "runs" / "demo"), str(folder / "molecules.smi"),
                     "--out", str(folder / "z.npy")]) == 0
    assert cli.main(["finetune", str(folder / "runs" / "demo"), str(folder / "drugs.csv"),
                     "--out", str(folder / "runs" / "drugs"), "--extend-vocab", "-n", "0",
                     "--max-steps", "6"]) == 0
    assert SHIP.main([str(folder / "runs" / "demo"), "moses", "--root",  # pretrained:moses
                      str(folder / PRETRAINED_ROOT), "--prior-float16"]) == 0
    return folder


def _prepare(folder, stand_ins, argv: list[str]) -> None:
    """Copies into ``folder`` the stand-ins ``argv`` reads: files by name, and for each
    ``runs/NAME`` that is not the new run of a ``train`` or ``demo`` command, the stand-in of
    that name (``runs/onehot``: trained on the one-hot ``x.npy``) or else the demo's run."""
    for entry in os.listdir(stand_ins):
        if entry != "runs":
            source = stand_ins / entry
            (shutil.copytree if source.is_dir() else shutil.copy)(source, folder / entry)
    creates = None
    if argv[0] in ("train", "demo", "finetune") and "--resume" not in argv:
        creates = argv[argv.index("--out") + 1] if "--out" in argv else "runs/demo"
    for word in argv:
        match = re.match(r"(runs/[\w.-]+)(/|$)", word)  # a run, or a file inside one
        run = match.group(1) if match else None
        if run and run != creates and not (folder / run).exists():
            made = stand_ins / run if (stand_ins / run).exists() else stand_ins / "runs" / "demo"
            shutil.copytree(made, folder / run, ignore=shutil.ignore_patterns(".lock"))


def _check_output(argv: list[str], out: str, folder) -> None:
    """The shape of what the command printed or wrote."""
    if "--json" in argv:
        json.loads(out)
    out_file = folder / argv[argv.index("--out") + 1] if "--out" in argv else None
    if argv[0] == "sample":
        n = int(argv[argv.index("-n") + 1])
        if out_file is not None and out_file.suffix == ".npy":
            assert np.load(out_file).shape[0] == n
            return
        conditioned = "--where" in argv or "--scaffold" in argv
        if conditioned and out_file is not None and out_file.suffix == ".csv":
            import csv

            lines = [row["smiles"] for row in csv.DictReader(out_file.read_text().splitlines())]
        else:
            lines = (out_file.read_text() if out_file else out).splitlines()
        # a search on the tiny stand-in may stop at its budget with fewer
        assert len(lines) == n or (("--valid-only" in argv or conditioned)
                                   and len(lines) <= n), len(lines)
        if conditioned:
            _recheck(argv, lines)
        if "--raw" not in argv:  # canonical SMILES unless asked otherwise
            from seqvae.data.chemistry import canonical_smiles

            assert all(canonical_smiles(line) in (line, None) for line in lines)
    if argv[0] == "encode" and "--out" in argv:
        z = np.load(folder / argv[argv.index("--out") + 1])
        assert z.shape[0] == len(MOLECULES) * 3
    if argv[0] == "interpolate":
        steps = int(argv[argv.index("--steps") + 1]) if "--steps" in argv else 10
        assert len(out.splitlines()) == steps
    if argv[0] == "decode":
        assert len(out.splitlines()) == len(MOLECULES) * 3


def _recheck(argv: list[str], lines: list[str]) -> None:
    """Every molecule of ``sample --where/--scaffold`` is distinct, valid, meets each condition
    and holds the scaffold, checked again with RDKit."""
    from seqvae.conditional import Checker, parse_conditions, parse_scaffold

    where = [argv[i + 1] for i, word in enumerate(argv) if word == "--where"]
    scaffold = argv[argv.index("--scaffold") + 1] if "--scaffold" in argv else None
    checked = Checker(parse_conditions(where) if where else (),
                      parse_scaffold(scaffold) if scaffold else None).check(lines)
    assert checked.ok.all() and len(set(lines)) == len(lines), lines


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 20, COMMANDS
    assert any(words[1:3] == ["demo", "--out"] for _, _, words, _ in COMMANDS)


@pytest.mark.slow
@pytest.mark.parametrize("document, line, words, comment", README_COMMANDS,
                         ids=[f"{d}:{n}" for d, n, _, _ in README_COMMANDS])
def test_documented_command_runs_as_written(document, line, words, comment, stand_ins, tmp_path,
                                            monkeypatch, capsys):
    run_command(document, line, words, comment, stand_ins, tmp_path, monkeypatch, capsys)


def run_command(document, line, words, comment, stand_ins, tmp_path, monkeypatch, capsys):
    """Runs one documented command in ``tmp_path`` with its stand-ins and checks its output."""
    for module, package in OPTIONAL_PACKAGES.items():
        if package in comment and importlib.util.find_spec(module) is None:
            pytest.skip(f"{document}:{line} needs {package}, which is not installed")
    if words[0] == "python":  # python -m seqvae ..., python examples/...: their own process
        result = subprocess.run([sys.executable] + words[1:], cwd=ROOT, capture_output=True,
                                text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-2000:]
        return
    from seqvae import cli, pretrained
    from seqvae.explore import app as app_lib

    argv = words[1:]
    _prepare(tmp_path, stand_ins, argv)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(pretrained.ROOT_ENV, str(stand_ins / PRETRAINED_ROOT))
    monkeypatch.setenv("SEQVAE_CACHE_DIR", str(tmp_path / ".cache"))
    served = []
    real_build = app_lib.build_app

    def build_app(explorer):  # the explorer is built and traced; serving it would block
        app = real_build(explorer)
        app.run = lambda **options: served.append(options)
        return app

    monkeypatch.setattr(app_lib, "build_app", build_app)
    capsys.readouterr()
    status = cli.main(argv)
    out, err = capsys.readouterr()
    assert status == 0, f"{document}:{line}: seqvae {' '.join(argv)}\n{err[-3000:]}"
    _check_output(argv, out, tmp_path)
    if argv[0] == "explore":
        assert served and served[0]["port"] == 8050
