"""Asked-for molecules: property conditions and scaffolds, and the search that returns only
molecules meeting them, each checked by RDKit.

``conditions`` parses ``--where`` conditions and checks molecules against them and a
substructure; ``scaffolds`` reads a scaffold and writes the prefixes that make the decoder
decorate it; ``kernels`` finds where to draw z (near molecules known to meet the conditions)
and learns which kernels pay; ``search`` runs the search (``sample_where``). ``seqvae sample
--where/--scaffold`` and the explorer's condition box call ``sample_where``.
"""

from seqvae.conditional.conditions import (Checked, Checker, Condition, describe,
                                           parse_condition, parse_conditions)
from seqvae.conditional.scaffolds import Decorations, Scaffold, parse_scaffold, rooted_smiles
from seqvae.conditional.search import Found, sample_where

__all__ = ["Checked", "Checker", "Condition", "Decorations", "Found", "Scaffold", "describe",
           "parse_condition", "parse_conditions", "parse_scaffold", "rooted_smiles",
           "sample_where"]
