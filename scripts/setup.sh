#!/usr/bin/env bash
# Creates .venv (if missing) and installs seqvae with its test/report extras and the MOSES data.
# molsets must be installed with --no-deps (its own requirements pull in torch), which
# pyproject.toml cannot express, so it is installed here.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test,report]'
.venv/bin/python -m pip install -q --no-deps molsets==0.3.1
