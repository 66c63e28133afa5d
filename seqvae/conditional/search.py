"""``sample_where``: n distinct molecules that meet property conditions and hold a scaffold,
each checked by RDKit, from a search that steers z and the decoder towards them.

Each batch draws z (near molecules known to meet the conditions, ``kernels``; else from the
run's prior), decodes it (after a prefix that writes the scaffold, ``scaffolds.Decorations``;
else as the run samples: without the grammar's mask, a string the grammar rejects counting as
a miss), checks every molecule (``conditions.Checker``: RDKit on the canonical SMILES, the head's
prediction from its encoding for a ``col:`` property) and keeps the new ones that pass. What a
batch finds steers the next: kernels that gave new hits are drawn more, new hits become kernels
and decorated molecules prefixes. With ``steer=False`` it is sample-and-filter: the run's own
sampler (``inference.sample``) and the same checks, the baseline ``bench/conditional.py``
measures against.

The search stops when n molecules are found, or when ``max_draws`` molecules have been decoded
or ``time_budget`` seconds have passed, saying which (``Found.stopped``).
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from seqvae import inference
from seqvae.conditional import kernels as kernel_lib
from seqvae.conditional.conditions import Checker, Condition, describe, parse_conditions
from seqvae.conditional.scaffolds import Decorations, Scaffold, parse_scaffold
from seqvae.data.moses import is_moses
from seqvae.data.preparation import ids_to_texts
from seqvae.errors import SeqvaeError
from seqvae.run import Run

BATCH_SIZE = 250  # molecules decoded per step of the search: small enough to steer often


@dataclass
class Found:
    """What ``sample_where`` found.

    Attributes:
      molecules: distinct molecules meeting every condition (as decoded: canonical SMILES
        unless ``run.raw_output``), at most the n asked for.
      names: the conditions' properties.
      values: float64 ``(len(molecules), len(names))``: each molecule's checked values.
      asked: n.
      draws: molecules decoded.
      hits: decoded molecules that met every condition (repeats and reference molecules
        included): ``hits / draws`` is the first-draw hit rate.
      seconds: wall time of the search (set-up included).
      stopped: why it stopped short of ``asked`` ("" when it did not).
      steering: how z and prefixes were drawn, in words.
      wanted: the conditions in words.
      predicted: the ``col:`` properties among ``names`` (their values are the head's).
      distinct: new distinct molecules meeting everything the search found (the last batch's
        beyond ``asked`` included): ``distinct / draws`` is the rate it found them at.
      unique_hits: distinct molecules among the hits, reference molecules included.
      setup_seconds: of ``seconds``, those spent before the first draw (the reference
        molecules found and encoded, the scaffold's prefixes written).
    """

    molecules: list[str]
    names: tuple[str, ...]
    values: np.ndarray
    asked: int
    draws: int
    hits: int
    seconds: float
    stopped: str
    steering: str
    wanted: str
    predicted: tuple[str, ...] = ()
    distinct: int = 0
    unique_hits: int = 0
    setup_seconds: float = 0.0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.draws if self.draws else 0.0

    @property
    def new_rate(self) -> float:
        """Share of the decoded molecules that were new, distinct and met everything."""
        return self.distinct / self.draws if self.draws else 0.0

    @property
    def per_second(self) -> float:
        """Molecules returned per second of the whole call, set-up included."""
        return len(self.molecules) / max(self.seconds, 1e-9)

    @property
    def search_rate(self) -> float:
        """New distinct molecules meeting everything found per second of searching (set-up
        left out, the last batch's beyond ``asked`` counted): the rate a larger n would get."""
        return self.distinct / max(self.seconds - self.setup_seconds, 1e-9)

    def summary(self) -> str:
        """One line: how many were found, for what, how fast, and why it stopped short."""
        head = (f"{len(self.molecules)} molecules" if not self.stopped else
                f"found {len(self.molecules)} of {self.asked} molecules ({self.stopped})")
        checked = "RDKit" if not self.predicted else (
            f"RDKit, {', '.join(self.predicted)} by the property head's prediction")
        return (f"{head} with {self.wanted}, each checked ({checked}): {self.draws:,} decoded, "
                f"first-draw hit rate {100 * self.hit_rate:.1f}% ({100 * self.new_rate:.1f}% new "
                f"and distinct), {self.search_rate:.1f} new molecules/s searching, "
                f"{self.seconds:.1f} s in all ({self.setup_seconds:.1f} s of it setting up); "
                f"{self.steering}")

    def csv(self) -> str:
        """``smiles`` and each property's checked value, a row per molecule, header first."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(("smiles",) + self.names)
        for smiles, row in zip(self.molecules, self.values):
            writer.writerow([smiles] + [f"{value:.6g}" for value in row])
        return out.getvalue()


def sample_where(run: Run, n: int, where: Sequence[str | Condition] | str = (),
                 scaffold: str | Scaffold | None = None, *, temperature: float = 1.0,
                 top_k: int = 0, greedy: bool = False, seed: int = 0,
                 max_draws: int | None = None, time_budget: float | None = None,
                 batch_size: int = BATCH_SIZE, novel: bool = True, grammar: bool = True,
                 prior: str | None = None, rejection: int | None = None, steer: bool = True,
                 head=None,
                 progress: Callable[[str], None] | None = None) -> Found:
    """``n`` distinct molecules that meet ``where`` and hold ``scaffold``, each checked.

    Args:
      run: a molecule run (SMILES for scaffold prefixes; any molecule run otherwise).
      n: how many distinct molecules.
      where: conditions (``"logp=2.5±0.5"``, ``Condition`` s; ``conditions.parse_condition``).
      scaffold: a SMILES or SMARTS every molecule must hold (``scaffolds.parse_scaffold``).
      temperature, top_k, greedy: the decoder's sampling.
      seed: the same seed gives the same molecules (unless ``time_budget`` stops it).
      max_draws: decode at most this many molecules (None: ``100 n + 10,000``).
      time_budget: stop after this many seconds (None: no limit).
      batch_size: molecules decoded per step.
      novel: leave out the reference molecules that steer z (training molecules the kernels
        come from): a search steered by them would otherwise return many of them unchanged.
      grammar: decode under the SMILES grammar (by rejection or its mask, as the run does).
      prior: where unsteered z comes from (``standard``, ``fitted``; None: the run's own).
      rejection: decode without the grammar's mask, a string it rejects a miss (None: as the
        run samples, ``inference.rejection_rounds``; 0: under the mask). A scaffold's prefixes
        are always completed under the mask.
      steer: False samples the run's prior and filters (the baseline).
      head: the property head for ``col:`` conditions (default: the run's).
      progress: gets a line per batch.

    Raises:
      SeqvaeError: no condition and no scaffold, bad input (``parse_condition``,
        ``parse_scaffold``), a ``col:`` property the head does not predict, a scaffold the run
        cannot write, or a run that is not of molecules.
    """
    started = time.monotonic()
    items = [where] if isinstance(where, str) else list(where)
    conditions = tuple(c for item in items
                       for c in ((item,) if isinstance(item, Condition) else parse_conditions(item)))
    if isinstance(scaffold, str):
        scaffold = parse_scaffold(scaffold)
    if not conditions and scaffold is None:
        raise SeqvaeError("give a condition (--where) or a scaffold (--scaffold) to sample for")
    if not run.codec.molecules:
        raise SeqvaeError(f"{run.run_dir}: conditions and scaffolds need a molecule run, this one "
                          f"is {run.info['tokenizer']!r}")
    if n < 0 or batch_size < 1:
        raise SeqvaeError(f"-n must be >= 0 and the batch >= 1, got {n} and {batch_size}")
    max_draws = 100 * n + 10_000 if max_draws is None else max_draws
    checker = Checker(conditions, scaffold, _column_predictor(run, conditions, head))
    search = _Search(run, conditions, scaffold, checker, seed, steer, progress,
                     inference.rejection_rounds(run, rejection, grammar))
    setup_seconds = time.monotonic() - started
    found: dict[str, tuple[str, np.ndarray]] = {}
    every_hit: set[str] = set()
    draws = hits = step = 0
    stopped = ""
    while len(found) < n:
        if draws >= max_draws:
            stopped = f"the budget of {max_draws:,} draws is spent"
            break
        if time_budget is not None and time.monotonic() - started >= time_budget:
            stopped = f"the time budget of {time_budget:g} s is spent"
            break
        count = min(batch_size, max_draws - draws)
        decode_seed = int(np.random.default_rng([seed, step]).integers(1 << 30))
        texts, chosen = search.decode(count, decode_seed, temperature=temperature, top_k=top_k,
                                      greedy=greedy, grammar=grammar, prior=prior)
        checked = checker.check([text or "" for text in texts])
        new = np.zeros(count, bool)
        for row in np.flatnonzero(checked.ok):
            smiles = checked.canonical[row]
            every_hit.add(smiles)
            if smiles not in found and not (novel and smiles in search.references):
                found[smiles] = (texts[row], checked.values[row])
                new[row] = True
        batch_hits = int(checked.ok.sum())
        hits, draws, step = hits + batch_hits, draws + count, step + 1
        search.learn(chosen, new, [checked.canonical[row] for row in np.flatnonzero(new)],
                     batch_hits)
        if progress is not None:
            progress(f"{min(len(found), n)}/{n} found, {draws:,} decoded, hit rate "
                     f"{100 * hits / draws:.1f}%, {time.monotonic() - started:.0f} s")
    kept = list(found.values())[:n]
    values = (np.array([v for _, v in kept]) if kept else np.zeros((0, len(checker.names))))
    return Found([text for text, _ in kept], checker.names, values, n, draws, hits,
                 time.monotonic() - started, stopped, search.steering,
                 _wanted(conditions, scaffold), checker.column_names, len(found), len(every_hit),
                 setup_seconds)


def _wanted(conditions: Sequence[Condition], scaffold: Scaffold | None) -> str:
    parts = [describe(conditions)] if conditions else []
    if scaffold is not None:
        parts.append(f"{'SMARTS' if scaffold.smarts else 'scaffold'} {scaffold.text}")
    return " and ".join(parts)


def _column_predictor(run: Run, conditions: Sequence[Condition], head):
    """``texts -> (N, C)``: the head's predictions of the ``col:`` conditions' properties from
    each molecule's encoding (NaN where the run cannot encode it); None without such a
    condition."""
    columns = list(dict.fromkeys(c.name for c in conditions if not c.measured))
    if not columns:
        return None
    if head is None:
        from seqvae.property_fit import has_head, load_head

        if not has_head(run):
            raise SeqvaeError(f"{', '.join(columns)}: RDKit does not compute it and "
                              f"{run.run_dir} has no property head; fit one with 'seqvae "
                              f"fit-properties {run.run_dir} --data FILE.csv --properties "
                              f"{columns[0]}'")
        head = load_head(run)
    indices = [head.index(name) for name in columns]

    def predict(texts: list[str]) -> np.ndarray:
        out = np.full((len(texts), len(columns)), np.nan)
        kept, means, _ = inference.encode_writable(run, texts)
        if len(kept):
            out[kept] = head.predict(means)[:, indices]
        return out

    return predict


def decode_or_reject(run: Run, z: np.ndarray, **sampling) -> list[str | None]:
    """Texts decoded from ``z (N, L)`` without the grammar's mask, None where the grammar
    rejected the draw (a miss for the search); ``sampling`` as ``inference.decode_id_batches``
    takes it."""
    texts: list[str | None] = []

    def keep(batch) -> None:
        ids, rejected = batch
        texts.extend(None if bad else text
                     for text, bad in zip(ids_to_texts(run.codec, ids), rejected))

    inference.decode_id_batches(run, z, keep, reject=True, **sampling)
    return texts


class _Search:
    """Where a batch's z and prefixes come from, and what it learns from the batch's hits."""

    def __init__(self, run: Run, conditions, scaffold, checker: Checker, seed: int, steer: bool,
                 progress, rounds: int):
        self.run, self.steer, self.rounds = run, steer, rounds
        self.references: set[str] = set()
        self.kernels: kernel_lib.Kernels | None = None
        self.prefixes = None
        self.widen, self.recent = kernel_lib.STEER_WIDEN, (0.0, 0.0)
        steps = []
        if steer and scaffold is not None and scaffold.molecule is not None \
                and run.info["tokenizer"] == "smiles":
            try:
                self.prefixes = Decorations(run, scaffold, seed)
            except SeqvaeError:
                if not scaffold.smarts:  # a SMILES the run cannot write: nothing holds it
                    raise
                # a SMARTS the run cannot write as a prefix may still match what it writes
        if self.prefixes is not None:
            steps.append(f"the decoder writes the scaffold first ({len(self.prefixes.ids)} "
                         "SMILES of it, each ending at an attachment point) and decorates it")
        if steer and (conditions or (scaffold is not None and self.prefixes is None)):
            table = kernel_lib.reference_table(run, checker.names, progress)
            mask = None
            if scaffold is not None and self.prefixes is None:
                mask = _holding(table.texts, scaffold)
            rows, rate = kernel_lib.near_target(table, conditions, mask, seed)
            kept, means, scales = kernel_lib.encoded_kernels(run, [table.texts[i] for i in rows])
            if len(kept):
                self.kernels = kernel_lib.Kernels(means, scales, rate[kept], seed)
                meeting = int((rate[kept] == kernel_lib.PRIOR_RATE).sum())
                what = ("meeting the conditions by their RDKit values" if conditions
                        else "holding the substructure")
                steps.append(f"z near {len(kept):,} molecules of {table.source} ({meeting:,} "
                             f"{what}), each new hit added, the kernels that give new hits "
                             "drawn more, and from the prior as often as it does as well, "
                             "both at a width that follows the repeats among the hits "
                             f"({kernel_lib.STEER_WIDEN:g}x to start)")
                self.references = _canonical(table.texts, table.source)
            else:
                steps.append(f"no molecule of {table.source} to steer by: z from the prior")
        if not steer:
            steps.append("sample-and-filter: the run's own sampler, every molecule checked")
        elif self.kernels is None and self.prefixes is not None:
            steps.append("z from the run's prior")
        self.steering = "; ".join(steps)

    def decode(self, count: int, seed: int, *, temperature, top_k, greedy, grammar, prior):
        """``count`` texts (None where the grammar rejected a draw) and the kernel of each
        (None without kernels)."""
        run = self.run
        if not self.steer:
            return inference.sample(run, count, temperature=temperature, top_k=top_k,
                                    greedy=greedy, seed=seed, batch_size=count, grammar=grammar,
                                    prior=prior, rejection=self.rounds), None
        chosen = self.kernels.choose(count) if self.kernels is not None else None
        z = inference.prior_draw(run, count, seed, prior, widen=self.widen)
        if chosen is not None:
            z = self.kernels.draw(chosen, z, self.widen)
        sampling = dict(greedy=greedy, temperature=temperature, top_k=top_k, seed=seed,
                        batch_size=count)
        if self.prefixes is not None:
            prefix, lengths = self.prefixes.draw(count)
            return inference.decode(run, z, grammar=grammar, prefix=prefix,
                                    prefix_lengths=lengths, **sampling), chosen
        if not (grammar and self.rounds):
            return inference.decode(run, z, grammar=grammar, **sampling), chosen
        return decode_or_reject(run, z, **sampling), chosen

    def learn(self, chosen, new: np.ndarray, molecules: list[str], hits: int) -> None:
        """Counts each kernel's new hits, makes the new hits kernels (from their parent's rate)
        while the kernels find more than the prior (else the search is sampling the prior and
        filtering, and encoding the hits would only slow it) and, under a scaffold, prefixes;
        widens the next draws while the batch's ``hits`` repeat (``kernel_lib.next_widen``).
        Sampling the prior and filtering (``steer=False``) learns nothing."""
        if not self.steer:
            return
        self.widen, self.recent = kernel_lib.next_widen(self.widen, self.recent, hits,
                                                        hits - len(molecules))
        if self.prefixes is not None and molecules:
            self.prefixes.grow(molecules)
        if self.kernels is None or chosen is None:
            return
        self.kernels.update(chosen, new)
        if molecules and self.kernels.pays():
            kept, means, scales = kernel_lib.encoded_kernels(self.run, molecules)
            parents = chosen[np.flatnonzero(new)][kept]
            self.kernels.add(means, scales, self.kernels.posterior_rate(parents))


def _holding(texts: Sequence[str], scaffold: Scaffold) -> np.ndarray:
    """bool ``(N,)``: which molecules hold the scaffold."""
    from rdkit import Chem, rdBase

    with rdBase.BlockLogs():
        mols = (Chem.MolFromSmiles(text) for text in texts)
        return np.array([mol is not None and scaffold.contained_in(mol) for mol in mols], bool)


def _canonical(texts: Sequence[str], source: str) -> set[str]:
    """The molecules as canonical SMILES (MOSES's files already are)."""
    if all(is_moses(part.strip()) for part in source.split("+")):
        return set(texts)
    from seqvae.data.chemistry import canonical_or_as_is

    return set(canonical_or_as_is(texts))
