"""Where z is drawn for asked-for molecules: the posteriors of molecules known to meet the
conditions, chosen by how often each has given new molecules that do.

The run's prior draws z from the aggregate posterior, a kernel ``q(z | x_i)`` per training
molecule (``seqvae.latent_prior``). Conditioned on a property, the kernels worth drawing from
are those of molecules that have it: ``reference_table`` finds molecules whose RDKit values the
run knows (the tables ``seqvae fit-properties`` cached, else computed once on the training
data), ``near_target`` keeps those meeting the conditions (or, where few do, the nearest), and
``Kernels`` holds their encodings, each widened by the run's ``model.prior_widen`` as the prior
widens its own, and drawn wider still by a factor the search sets (``next_widen``), so that the
molecules decoded near a kernel differ from it and from each other (the search's draws from the
prior are widened as much, for the same reason: on the first stage of pretrained:moses the prior
as sampled gave a training molecule in half its draws). How much wider depends on the run: a
sharp decoder (the demo) gives a kernel's molecule back unless the kernel is widened ~1.6x, a
wider posterior (pretrained:moses's KL-0.5 stage) gives distinct molecules at 1x, where 1.6x
halves the hit rate. So the factor starts at ``STEER_WIDEN`` and follows the repeats: wider
while more than ``REPEATS[1]`` of the recent hits repeat a molecule found before, narrower
(to the prior's own width at least) while fewer than ``REPEATS[0]`` do.

Measured on the demo (``bench/kernel_signal.py``), a molecule decoded from a kernel is the
kernel's own in 17% of draws and otherwise differs from it (its logP by 0.61 in the median), so
which kernels pay is learned while sampling: each kernel's rate of new hits has a Beta posterior, and every batch draws from the
kernels of highest Thompson sample (one z each, so a batch spreads over many kernels), and each
new hit becomes a kernel itself (its encoding), starting from its parent's rate.

The kernels are chosen by their molecules' RDKit values, not by the property head: on the demo
the head's prediction at the drawn z (far from the posterior means it was fitted on) correlates
0.07 with the decoded molecule's logP, its prediction at the kernel's centre 0.54, as the kernel
molecule's own value does (``bench/kernel_signal.py``); the value is exact where the prediction
errs, and needs no head. For a ``col:`` property, the value known for a reference molecule is its
column's, read from the table the head was fitted on.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from seqvae import inference
from seqvae.conditional.conditions import Condition
from seqvae.data import properties as props
from seqvae.errors import SeqvaeError
from seqvae.property_fit import known_properties, property_table
from seqvae.run import Run

REFERENCE_MOLECULES = 20_000  # molecules of the training data computed when none are cached
MAX_KERNELS = 1_000  # reference kernels kept near the target (more are found while sampling)
MIN_KERNELS = 256  # the nearest this many at least, where fewer meet the conditions
PRIOR_RATE = 0.2  # a reference meeting the conditions: its assumed rate of new hits
NEAR_RATE = 0.05  # a nearest one that does not
PRIOR_STRENGTH = 4.0  # draws' worth of that assumption
MIN_SHARE = 0.05  # of a batch drawn from the prior, and from the kernels, at least
# Kernels are wider than the prior's own by this factor: a sharp decoder gives a kernel's own
# molecule (or an earlier hit) back from most draws near it. On pretrained:moses's first stage
# (25 s per target: logP 4.5 +- 0.25, QED >= 0.9, logP >= 3 with QED >= 0.85) 1.0x found 33-45
# new molecules/s with 51-67% of the hits distinct; 1.5x 31-44/s, 93-94%; 1.7x 27-34/s, 97-99%;
# 2.0x 23-27/s, >99%.
STEER_WIDEN = 1.6  # where the factor starts
# The factor's bounds: never narrower than the prior samples; at most 1.8x, for past it the
# hits thin faster than the repeats do (the demo, QED >= 0.9, 60 s: bounded at 3.0x the search
# found 38 new molecules/s, 99.2% of the hits distinct; at 1.8x 91/s, 96.9%; sampling the prior
# and filtering 71/s).
WIDEN_RANGE = (1.0, 1.8)
WIDEN_STEP = 1.1  # the factor's change after a batch outside the band
REPEATS = (0.01, 0.03)  # the band of the recent hits' share of repeats the factor keeps to
RECENT = 0.7  # the weight of the earlier batches' hits and repeats after each batch


def next_widen(widen: float, recent: tuple[float, float], hits: int, repeats: int
               ) -> tuple[float, tuple[float, float]]:
    """The kernels' widening factor after a batch, and the decayed counts it was set by.

    Args:
      widen: the factor the batch was drawn at.
      recent: ``(hits, repeats)`` of the earlier batches, decayed.
      hits: the batch's decoded molecules that met every condition.
      repeats: those of them that were found before (or are reference molecules).

    Returns:
      ``(widen, (hits, repeats))``: ``widen`` times ``WIDEN_STEP`` while more than
      ``REPEATS[1]`` of the recent hits were repeats, divided by it while fewer than
      ``REPEATS[0]`` were, within ``WIDEN_RANGE``; unchanged with under 10 recent hits.
    """
    recent_hits = RECENT * recent[0] + hits
    recent_repeats = RECENT * recent[1] + repeats
    if recent_hits >= 10:
        share = recent_repeats / recent_hits
        if share > REPEATS[1]:
            widen = min(widen * WIDEN_STEP, WIDEN_RANGE[1])
        elif share < REPEATS[0]:
            widen = max(widen / WIDEN_STEP, WIDEN_RANGE[0])
    return widen, (recent_hits, recent_repeats)


def reference_table(run: Run, names: Sequence[str],
                    progress: Callable[[str], None] | None = None) -> props.PropertyTable:
    """Molecules with known values of ``names``: those the run has cached
    (``property_fit.known_properties``), else the first ``REFERENCE_MOLECULES`` of the run's
    training data, computed by RDKit and cached in ``RUN/properties/``.

    Raises:
      SeqvaeError: a ``col:`` property with no cached table holding it, or a run whose
        training data is not named.
    """
    names = tuple(names)
    known = known_properties(run, names)
    if known is not None:
        return known
    data = run.info.get("data_source")
    if data is None:
        raise SeqvaeError(f"{run.run_dir}: run.json names no training data to find molecules "
                          "with the asked-for properties in")
    if not names:  # a substructure only: any molecules will do
        from seqvae.data.sources import read_sequences

        seqs = read_sequences(data, run.config.data.column, REFERENCE_MOLECULES)
        return props.PropertyTable(seqs.texts, (), np.zeros((len(seqs.texts), 0)),
                                   seqs.line_numbers, seqs.source)
    columns = [name for name in names if name.startswith(props.COLUMN_PREFIX)]
    if columns:
        raise SeqvaeError(f"{', '.join(columns)}: no molecules with known values in "
                          f"{run.run_dir}/properties/; fit the head on that column first "
                          f"('seqvae fit-properties {run.run_dir} --data FILE.csv --properties "
                          f"...,{columns[0]}')")
    if progress is not None:
        progress(f"computing {', '.join(names)} of {REFERENCE_MOLECULES:,} molecules of {data} "
                 f"(once: cached in {run.run_dir}/properties/)")
    table = property_table(run, data, names, REFERENCE_MOLECULES)
    keep = np.flatnonzero(~table.nan_rows())
    return props.PropertyTable([table.texts[i] for i in keep], names, table.values[keep],
                               [table.line_numbers[i] for i in keep], table.source)


def near_target(table: props.PropertyTable, conditions: Sequence[Condition],
                mask: np.ndarray | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``table`` to draw z near, and each one's assumed rate of new hits.

    Every row meeting the conditions (at most ``MAX_KERNELS``, drawn at random with ``seed``),
    and where fewer than ``MIN_KERNELS`` do, the nearest others (distance outside each interval
    in units of the property's spread). ``mask`` (bool ``(N,)``) restricts the rows (e.g. to
    molecules holding a scaffold).

    Returns:
      ``(rows int (K,), rate float (K,))``.
    """
    distance = np.zeros(len(table.texts))
    depth = np.full(len(table.texts), np.inf)
    for condition in conditions:
        column = table.values[:, table.names.index(condition.name)]
        spread = float(np.nanstd(column)) or 1.0
        distance += condition.distance(column) / spread
        depth = np.minimum(depth, condition.depth(column) / spread)
    if mask is not None:
        distance[~mask] = np.inf
    meeting = np.flatnonzero(distance == 0)
    rng = np.random.default_rng([seed, 0x7E5])
    if len(meeting) > MAX_KERNELS:  # the deepest inside: what is decoded near them strays less
        order = np.lexsort((rng.random(len(meeting)), -depth[meeting]))
        meeting = np.sort(meeting[order[:MAX_KERNELS]])
    rows, rate = meeting, np.full(len(meeting), PRIOR_RATE)
    if len(rows) < MIN_KERNELS:
        order = np.argsort(distance, kind="stable")
        order = order[np.isfinite(distance[order]) & (distance[order] > 0)]
        near = order[:MIN_KERNELS - len(rows)]
        rows = np.concatenate([rows, near])
        rate = np.concatenate([rate, np.full(len(near), NEAR_RATE)])
    return rows.astype(np.int64), rate


class Kernels:
    """Latent kernels ``N(mean_k, diag(scale_k^2))`` with a learned rate of new hits each, and
    the run's prior as one more arm.

    A batch's draws are split between the prior and the kernels by Thompson's probability
    matching (the share of paired draws from the two arms' Beta posteriors in which the prior's
    rate is the higher, kept within ``MIN_SHARE`` .. ``1 - MIN_SHARE``): where the prior meets
    the conditions about as often as the kernels do (common targets), most of the batch comes
    from it, and the search is never much slower than sampling the prior and filtering.

    Args:
      means, scales: float32 ``(K, L)``.
      rate: float ``(K,)`` the assumed rate of each before any draw.
      seed: draws the Thompson samples and the noise.
    """

    def __init__(self, means: np.ndarray, scales: np.ndarray, rate: np.ndarray, seed: int = 0):
        self.means = np.asarray(means, np.float32)
        self.scales = np.asarray(scales, np.float32)
        self.rate = np.clip(np.asarray(rate, np.float64), 1e-3, 1 - 1e-3)
        self.draws = np.zeros(len(self.means))
        self.hits = np.zeros(len(self.means))
        self.prior_draws = self.prior_hits = 0.0
        self.rng = np.random.default_rng([seed, 0x4B3])

    def __len__(self) -> int:
        return len(self.means)

    def prior_share(self) -> float:
        """The share of the next batch drawn from the prior (probability matching)."""
        kernel_draws, kernel_hits = self.draws.sum(), self.hits.sum()
        prior = self.rng.beta(self.prior_hits + 1, self.prior_draws - self.prior_hits + 1, 512)
        kernels = self.rng.beta(kernel_hits + 1, kernel_draws - kernel_hits + 1, 512)
        return float(np.clip(np.mean(prior > kernels), MIN_SHARE, 1 - MIN_SHARE))

    def prior_rate(self) -> float:
        """The posterior mean rate of new hits of the prior's draws (a uniform Beta prior)."""
        return (self.prior_hits + 1) / (self.prior_draws + 2)

    def pays(self) -> bool:
        """Whether the kernels' draws have given new hits more often than the prior's so far
        (posterior means): only then is encoding new hits as kernels worth its time."""
        return bool((self.hits.sum() + 1) / (self.draws.sum() + 2) > self.prior_rate())

    def choose(self, count: int) -> np.ndarray:
        """``count`` kernel indices ``(count,)``, -1 for a draw from the prior: the kernels of
        highest Thompson sample from each one's Beta posterior, distinct while there are enough
        kernels."""
        from_prior = int(round(count * self.prior_share()))
        alpha = self.hits + PRIOR_STRENGTH * self.rate
        beta = self.draws - self.hits + PRIOR_STRENGTH * (1 - self.rate)
        order = np.argsort(-self.rng.beta(alpha, beta), kind="stable")
        return np.concatenate([np.resize(order, count - from_prior),
                               np.full(from_prior, -1)]).astype(np.int64)

    def draw(self, chosen: np.ndarray, prior_z: np.ndarray, widen: float = 1.0) -> np.ndarray:
        """float32 ``(len(chosen), L)``: one z from each chosen kernel, its scales times
        ``widen``, and ``prior_z``'s row where the draw is the prior's."""
        z = np.array(prior_z, np.float32)
        rows = np.flatnonzero(chosen >= 0)
        eps = self.rng.standard_normal((len(rows), self.means.shape[1])).astype(np.float32)
        z[rows] = self.means[chosen[rows]] + np.float32(widen) * self.scales[chosen[rows]] * eps
        return z

    def update(self, chosen: np.ndarray, new_hit: np.ndarray) -> None:
        """Counts a draw for each chosen kernel (or the prior), and a hit where its draw was a
        new hit."""
        new_hit = np.asarray(new_hit, np.float64)
        prior = chosen < 0
        self.prior_draws += float(prior.sum())
        self.prior_hits += float(new_hit[prior].sum())
        np.add.at(self.draws, chosen[~prior], 1.0)
        np.add.at(self.hits, chosen[~prior], new_hit[~prior])

    def posterior_rate(self, rows: np.ndarray) -> np.ndarray:
        """The posterior mean rate of new hits of kernels ``rows`` (-1: the prior's)."""
        rows = np.asarray(rows)
        kernel = np.maximum(rows, 0)
        rate = ((self.hits[kernel] + PRIOR_STRENGTH * self.rate[kernel])
                / (self.draws[kernel] + PRIOR_STRENGTH))
        return np.where(rows < 0, self.prior_rate(), rate)

    def add(self, means: np.ndarray, scales: np.ndarray, rate: np.ndarray) -> None:
        """New kernels (the encodings of new hits), each with an assumed rate."""
        self.means = np.concatenate([self.means, np.asarray(means, np.float32)])
        self.scales = np.concatenate([self.scales, np.asarray(scales, np.float32)])
        self.rate = np.concatenate([self.rate, np.clip(rate, 1e-3, 1 - 1e-3)])
        self.draws = np.concatenate([self.draws, np.zeros(len(means))])
        self.hits = np.concatenate([self.hits, np.zeros(len(means))])


def encoded_kernels(run: Run, texts: Sequence[str], widen: float | None = None):
    """``(rows, means (K, L), scales (K, L))`` of the texts the run can encode: their posterior
    means, and standard deviations widened by ``widen`` (None: ``model.prior_widen``, as the
    prior widens its own)."""
    widen = run.config.model.prior_widen if widen is None else widen
    kept, means, log_vars = inference.encode_writable(run, texts)
    return kept, means, (widen * np.exp(0.5 * log_vars)).astype(np.float32)
