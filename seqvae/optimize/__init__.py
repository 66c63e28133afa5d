"""Latent-space optimisation: better molecules near given ones, through the property head
(``search``), and its results written out (``results``); this module gathers them."""

from seqvae.optimize.results import (RESULT_COLUMNS, path_lines, results_csv, summarize,
                                     trajectory_csv)
from seqvae.optimize.search import (OptimizeSettings, SearchResult, StartResult, ascent_paths,
                                    decode_points, elite_centres, gradient_of, optimize,
                                    optimize_latent)

__all__ = ["RESULT_COLUMNS", "OptimizeSettings", "SearchResult", "StartResult", "ascent_paths",
           "decode_points", "elite_centres", "gradient_of", "optimize", "optimize_latent",
           "path_lines", "results_csv", "summarize", "trajectory_csv"]
