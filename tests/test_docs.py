"""The documentation as a user reads it: a short README, a page per task that starts from a
command, a configuration reference that matches the code, and no development diary anywhere."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASK_PAGES = ["training", "sampling", "latent-space", "evaluation", "properties", "explorer",
              "export", "doctor"]


def _tracked_text_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    return [name for name in listed.stdout.split("\n")
            if name.endswith((".py", ".md", ".toml", ".sh", ".txt", ".cfg", ".yml", ".yaml"))
            or name in (".ci/run",)]


def test_the_readme_is_short():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        lines = handle.read().count("\n")
    assert lines <= 250, f"README.md has {lines} lines"


@pytest.mark.parametrize("page", TASK_PAGES)
def test_each_task_page_starts_from_a_command(page):
    with open(os.path.join(ROOT, "docs", f"{page}.md"), encoding="utf-8") as handle:
        text = handle.read()
    before_sections = text.split("\n## ", 1)[0]
    assert "```bash\n" in before_sections, f"docs/{page}.md: no command before its first section"
    assert f"docs/{page}.md" in open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()


def test_the_configuration_reference_matches_the_code():
    done = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "config_reference.py"),
                           "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_no_development_history_in_the_tree():
    """History lives in git log: no numbered sessions in code, docs, tests or benchmarks."""
    pattern = re.compile("sess" + r"ion[s]?[ -][0-9]", re.IGNORECASE)  # split: not a match itself
    found = []
    for name in _tracked_text_files():
        path = os.path.join(ROOT, name)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, start=1):
                if pattern.search(line):
                    found.append(f"{name}:{number}: {line.strip()[:80]}")
    assert not found, "\n".join(found[:20])
