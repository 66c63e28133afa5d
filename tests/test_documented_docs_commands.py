"""Every command that docs/ shows runs as written (tests/test_documented_commands.py runs
README.md's and holds the stand-ins; a file of its own, so that pytest-xdist runs the two
halves on two workers)."""

import pytest
from test_documented_commands import DOCS_COMMANDS, run_command, shrunk, stand_ins  # noqa: F401


@pytest.mark.slow
@pytest.mark.parametrize("document, line, words, comment", DOCS_COMMANDS,
                         ids=[f"{d}:{n}" for d, n, _, _ in DOCS_COMMANDS])
def test_documented_command_runs_as_written(document, line, words, comment, stand_ins, tmp_path,
                                            monkeypatch, capsys):
    run_command(document, line, words, comment, stand_ins, tmp_path, monkeypatch, capsys)
