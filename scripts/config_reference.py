"""Writes docs/configuration.md from seqvae/config.py: every field of every section, its type,
its default and the comment beside it, and each preset's values where they differ.

    python scripts/config_reference.py            # rewrites docs/configuration.md
    python scripts/config_reference.py --check    # exit 1 when the page differs (tests run it)
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "configuration.md")
SECTIONS = {"model": "ModelConfig", "data": "DataConfig", "train": "TrainConfig"}


def field_comments(source: str, class_name: str) -> dict[str, str]:
    """``field -> comment`` of a dataclass in ``source``: the ``#`` comment on its line and the
    ``#   ...`` lines that continue it."""
    lines = source.split("\n")
    tree = ast.parse(source)
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name)
    comments = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            line = lines[node.lineno - 1]
            text = line.split("#", 1)[1].strip() if "#" in line else ""
            following = node.end_lineno
            while following < len(lines) and lines[following].strip().startswith("#   "):
                text += " " + lines[following].strip()[1:].strip()
                following += 1
            comments[node.target.id] = text
    return comments


def render() -> str:
    sys.path.insert(0, ROOT)
    from seqvae import config as config_lib
    from seqvae.presets import PRESETS, preset_config

    source = open(config_lib.__file__, encoding="utf-8").read()
    presets = {name: preset_config(name) for name in PRESETS}
    out = ["# Configuration reference",
           "",
           "Every field of a run's configuration (`config.json` in the run directory), generated from",
           "`seqvae/config.py` by `python scripts/config_reference.py` (a test fails when this page and",
           "the code differ). Set any field on the command line with `--set section.field=value`, or",
           "give a TOML/JSON file of sections with `--config FILE`:",
           "",
           "```bash",
           "seqvae train data.smi --out runs/mine --set model.latent_dim=32 --set train.max_steps=20",
           "```",
           "",
           "A preset (`--preset demo|moses|moses_original|user`) sets many fields at once; the last",
           "columns give each preset's value where it differs from the default. Without `--preset`,",
           "`seqvae train FILE` takes `user` and `seqvae train` (MOSES) takes `demo`.",
           ""]
    for section, class_name in SECTIONS.items():
        cls = getattr(config_lib, class_name)
        doc = (cls.__doc__ or "").strip().split("\n")[0]
        out += [f"## `{section}`: {doc}", "",
                "| field | type | default | " + " | ".join(PRESETS) + " | meaning |",
                "|---|---|---|" + "---|" * len(PRESETS) + "---|"]
        comments = field_comments(source, class_name)
        for field in dataclasses.fields(cls):
            default = getattr(cls(), field.name)
            differs = []
            for name in PRESETS:
                value = getattr(getattr(presets[name], section), field.name)
                differs.append(f"`{value!r}`" if value != default else "")
            kind = field.type if isinstance(field.type, str) else field.type.__name__
            meaning = comments.get(field.name, "").replace("|", "\\|")
            out.append(f"| `{field.name}` | {kind} | `{default!r}` | " + " | ".join(differs)
                       + f" | {meaning} |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    text = render()
    if args.check:
        current = open(PAGE, encoding="utf-8").read() if os.path.exists(PAGE) else ""
        if current != text:
            print(f"{PAGE} differs from seqvae/config.py; run python scripts/config_reference.py",
                  file=sys.stderr)
            return 1
        return 0
    os.makedirs(os.path.dirname(PAGE), exist_ok=True)
    with open(PAGE, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
