#!/usr/bin/env bash
# Creates bench/moses_peer/.venv: MOSES 0.3.1 (molsets) on the old stack its metric code needs,
# so that make_reference.py can compute reference values with MOSES's own functions.
#
#   bash bench/moses_peer/setup.sh          # idempotent: re-running only checks the pins
#
# Why each pin:
#   numpy<2        moses uses np.NaN (removed in numpy 2)
#   pandas<2       moses uses DataFrame.append (removed in pandas 2) to load its filter lists
#   rdkit          a release built for numpy 1; moses also needs the removed rdkit.six (stand-in below)
#   torch          `import moses` and fcd_torch import torch; 2.13.0+cpu is a wheel on local disk
#                  (pinned with +cpu so that pip fails at once instead of downloading CUDA torch)
#   fcd_torch      MOSES's FCD (ChemNet weights ship inside the wheel); --no-deps like molsets,
#                  whose declared requirements would pull in other versions
# Python: 3.11 (PYTHON=... to choose another interpreter with a cp311-compatible wheel set).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="$HERE/.venv"
PYTHON=${PYTHON:-python3.11}

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)

"${PIP[@]}" install \
  numpy==1.26.4 pandas==1.5.3 scipy==1.13.1 matplotlib==3.8.4 rdkit==2023.9.6 \
  "torch==2.13.0+cpu"
"${PIP[@]}" install --no-deps molsets==0.3.1 fcd_torch==1.0.7

# rdkit.six was removed from RDKit (2020.09); moses/metrics/SA_Score/sascorer.py still imports
# `from rdkit.six import iteritems`. A stand-in with the names old RDKit code took from it.
SIX="$("$VENV/bin/python" -c 'import os, rdkit; print(os.path.join(os.path.dirname(rdkit.__file__), "six.py"))')"
cat > "$SIX" <<'PY'
"""Stand-in for rdkit.six (removed from RDKit in 2020.09), written by bench/moses_peer/setup.sh."""
import builtins
import io

PY2 = False
PY3 = True
string_types = (str,)
integer_types = (int,)
class_types = (type,)
text_type = str
binary_type = bytes
StringIO = io.StringIO
BytesIO = io.BytesIO
cmp = lambda a, b: (a > b) - (a < b)
iteritems = lambda d, **kw: iter(d.items(**kw))
itervalues = lambda d, **kw: iter(d.values(**kw))
iterkeys = lambda d, **kw: iter(d.keys(**kw))
next = builtins.next
unichr = chr
xrange = range
PY

# fails here, not later, if any piece is missing
"$VENV/bin/python" - <<'PY'
import warnings
warnings.simplefilter("ignore")
import moses, moses.metrics, fcd_torch, numpy, pandas, rdkit, scipy, torch
from moses.metrics.SA_Score import sascorer  # the rdkit.six import
print("moses", moses.__version__, "rdkit", rdkit.__version__, "numpy", numpy.__version__,
      "pandas", pandas.__version__, "scipy", scipy.__version__, "torch", torch.__version__)
PY
