"""``python -m seqvae`` is the same as the ``seqvae`` command."""

import sys

from seqvae.cli import main

sys.exit(main())
