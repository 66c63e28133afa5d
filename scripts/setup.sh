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
.venv/bin/python -m pip install -q -e '.[test,report,explore]'
.venv/bin/python -m pip install -q --no-deps molsets==0.3.1
# The explorer's browser tests drive Debian's headless Chromium (no browser download at run
# time). Best effort: where apt-get is missing or fails, tests/explore/test_browser.py skips
# and says why.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if command -v apt-get >/dev/null; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-liberation >/dev/null; } \
      || echo "setup.sh: could not install chromium and chromium-driver; the browser tests will skip" >&2
  else
    echo "setup.sh: no apt-get; install chromium and chromedriver for the browser tests" >&2
  fi
fi
