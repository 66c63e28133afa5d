"""The package's shape, read from the source the way a linter reads it: every import (at module
level or inside a function) goes down the layers of ``seqvae/__init__.py``, no two modules import
each other through any chain, and no module is too long to read as one concept."""

from __future__ import annotations

import ast
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "seqvae")
# Each top-level part of seqvae and its layer: a module imports its own part or lower layers only
# (training and inference share a layer: neither imports the other).
LAYERS = {"errors": 0, "files": 0, "parallel": 0, "messages": 0, "runtime": 1, "config": 1, "data": 2,
          "model": 3, "checkpoints": 4, "latent_prior": 4, "pretrained": 4, "run": 5, "training": 6,
          "inference": 6, "property_fit": 7, "export": 7, "warm_start": 7, "evaluation": 8, "optimize": 8,
          "conditional": 8, "explore": 9, "workflows": 10, "finetune": 11, "cli": 12, "__main__": 13, "presets": 2}
MAX_LINES = 450


def modules() -> dict[str, str]:
    """``seqvae.x.y`` -> path of every module of the package."""
    found = {}
    for folder, _, names in os.walk(PACKAGE):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                parts = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                found[".".join(parts)] = path
    return found


def imports(path: str, module: str, known: set[str]) -> set[str]:
    """The seqvae modules ``path`` imports, anywhere in it (``from seqvae import x`` counts as
    the module ``seqvae.x`` where there is one)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("seqvae"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            if not base.startswith("seqvae"):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
    return found - {module}


def part(module: str) -> str:
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 else "__init__"


GRAPH = {name: imports(path, name, set(modules())) for name, path in modules().items()}


def test_every_part_of_the_package_has_a_layer():
    assert {part(m) for m in GRAPH} - {"__init__"} == set(LAYERS)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_go_down_the_layers(module):
    own = part(module)
    if own == "__init__":
        assert not GRAPH[module], "importing seqvae must load nothing else"
        return
    upward = sorted(target for target in GRAPH[module]
                    if part(target) not in (own, "__init__")
                    and LAYERS[part(target)] >= LAYERS[own])
    assert not upward, f"{module} ({own}, layer {LAYERS[own]}) imports {upward}"


def test_no_module_imports_itself_through_a_chain():
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(GRAPH.get(module, ())):
            if target not in GRAPH:
                continue
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target] if target in path else [module, target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if not state.get(target):
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(GRAPH):
        if not state.get(module):
            visit(module, [module])


@pytest.mark.parametrize("module", sorted(modules()))
def test_each_module_is_short_and_says_what_it_holds(module):
    path = modules()[module]
    source = open(path, encoding="utf-8").read()
    lines = source.count("\n")
    assert lines <= MAX_LINES, f"{module}: {lines} lines (at most {MAX_LINES})"
    docstring = ast.get_docstring(ast.parse(source))
    assert docstring and len(docstring.split("\n")[0]) > 10, f"{module}: no first line saying what it holds"
