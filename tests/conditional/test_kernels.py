"""seqvae.conditional.kernels: reference molecules, the kernels near a target, how they learn."""

import numpy as np
import pytest

from seqvae.conditional import kernels as kernel_lib
from seqvae.conditional.conditions import parse_conditions
from seqvae.data import properties as props
from seqvae.errors import SeqvaeError
from seqvae.property_fit import property_table

MOLECULES = ["CCO", "CCCO", "CCCCO", "CCCCCO", "c1ccccc1", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1",
             "CCN(CC)CC", "CCCCCC", "OCC(O)CO"]


def table(values):
    texts = [f"C{'C' * i}" for i in range(len(values))]
    return props.PropertyTable(texts, ("logp",), np.array(values, float)[:, None],
                               list(range(1, len(values) + 1)), "hand")


def test_near_target_keeps_the_molecules_meeting_the_conditions(monkeypatch):
    conditions = parse_conditions("logp=1..2")
    monkeypatch.setattr(kernel_lib, "MIN_KERNELS", 3)
    rows, rate = kernel_lib.near_target(table([0.0, 1.5, 1.2, 5.0, 2.5, 1.9]), conditions)
    assert rows.tolist() == [1, 2, 5] and np.all(rate == kernel_lib.PRIOR_RATE)
    monkeypatch.setattr(kernel_lib, "MIN_KERNELS", 5)  # too few meet them: the nearest others
    rows, rate = kernel_lib.near_target(table([0.0, 1.5, 1.2, 5.0, 2.5, 1.9]), conditions)
    assert rows.tolist() == [1, 2, 5, 4, 0]
    assert rate.tolist() == [kernel_lib.PRIOR_RATE] * 3 + [kernel_lib.NEAR_RATE] * 2
    mask = np.array([True, False, True, True, True, True])
    rows, _ = kernel_lib.near_target(table([0.0, 1.5, 1.2, 5.0, 2.5, 1.9]), conditions, mask)
    assert 1 not in rows.tolist()
    monkeypatch.setattr(kernel_lib, "MAX_KERNELS", 2)  # too many: the deepest inside
    rows, _ = kernel_lib.near_target(table([1.1, 1.5, 1.2, 1.45, 1.9]), conditions, seed=3)
    assert rows.tolist() == [1, 3]


def test_kernels_are_chosen_by_thompson_sampling_and_learn():
    means = np.zeros((3, 2), np.float32)
    kernels = kernel_lib.Kernels(means, np.ones((3, 2), np.float32), np.full(3, 0.2), seed=0)
    chosen = kernels.choose(40)
    assert len(chosen) == 40 and set(chosen.tolist()) == {-1, 0, 1, 2}  # the prior is an arm
    for _ in range(40):  # kernel 2 always gives a new hit, the others and the prior never
        chosen = kernels.choose(6)
        kernels.update(chosen, chosen == 2)
    assert np.mean([kernels.choose(1)[0] == 2 for _ in range(20)]) > 0.9
    chosen = kernels.choose(6)  # one z a kernel while there are enough, then round again
    assert sorted(chosen.tolist()) == [0, 0, 1, 1, 2, 2]  # (the prior's 5% of 6 rounds to 0)
    assert kernels.posterior_rate(np.array([2]))[0] > 0.8 > 0.1 > kernels.posterior_rate(
        np.array([0]))[0]
    assert kernels.posterior_rate(np.array([-1]))[0] == pytest.approx(
        1 / (kernels.prior_draws + 2))  # the prior: no hit in its draws
    prior_z = np.full((3, 2), 7.0, np.float32)
    z = kernels.draw(np.array([0, -1, 1]), prior_z)
    assert z.shape == (3, 2) and z.dtype == np.float32 and np.all(z[1] == 7.0)
    assert not np.allclose(z[0], z[2])
    kernels.add(np.ones((2, 2)), np.ones((2, 2)), np.array([0.5, 0.5]))
    assert len(kernels) == 5 and kernels.draws[3:].tolist() == [0, 0]
    make = lambda: kernel_lib.Kernels(means, np.ones((3, 2), np.float32), np.full(3, 0.2), 0)
    assert make().choose(9).tolist() == make().choose(9).tolist()


def test_the_prior_takes_most_draws_where_it_meets_the_conditions_as_often():
    kernels = kernel_lib.Kernels(np.zeros((50, 2), np.float32), np.ones((50, 2), np.float32),
                                 np.full(50, 0.2), seed=1)
    for _ in range(30):  # the prior: a new hit every other draw; the kernels: none
        chosen = kernels.choose(20)
        kernels.update(chosen, (chosen < 0) & (np.arange(20) % 2 == 0))
    assert kernels.prior_share() == 1 - kernel_lib.MIN_SHARE
    assert not kernels.pays()  # no new kernels: the search is sampling the prior and filtering
    for _ in range(30):  # now the kernels give a new hit every draw
        chosen = kernels.choose(20)
        kernels.update(chosen, chosen >= 0)
    assert kernels.pays()


def test_reference_table_reads_what_the_run_cached(run, tmp_path):
    path = tmp_path / "molecules.smi"
    path.write_text("".join(f"{m}\n" for m in MOLECULES))
    property_table(run, str(path), ["logp", "qed", "mw"])  # as a head's fit caches it
    known = kernel_lib.reference_table(run, ["mw", "logp"])
    assert known.texts == MOLECULES and known.names == ("mw", "logp")
    from rdkit import Chem
    from rdkit.Chem import Crippen

    assert known.values[1, 1] == pytest.approx(Crippen.MolLogP(Chem.MolFromSmiles("CCCO")))
    with pytest.raises(SeqvaeError, match="col:pIC50: no molecules with known values"):
        kernel_lib.reference_table(run, ["logp", "col:pIC50"])


def test_encoded_kernels_widen_the_posteriors(run):
    rows, means, scales = kernel_lib.encoded_kernels(run, ["CCO", "not a molecule", "CCCO"],
                                                     widen=2.0)
    assert rows.tolist() == [0, 2] and means.shape == scales.shape == (2, 4)
    _, _, once = kernel_lib.encoded_kernels(run, ["CCO"], widen=1.0)
    np.testing.assert_allclose(scales[0], 2.0 * once[0], rtol=1e-5)


def test_the_kernels_widen_while_the_hits_repeat_and_narrow_back_to_the_prior():
    widen, recent = kernel_lib.STEER_WIDEN, (0.0, 0.0)
    widen, recent = kernel_lib.next_widen(widen, recent, hits=5, repeats=5)
    assert widen == kernel_lib.STEER_WIDEN and recent == (5, 5)  # too few hits to judge
    widen, recent = kernel_lib.next_widen(widen, recent, hits=20, repeats=4)
    assert widen == pytest.approx(kernel_lib.STEER_WIDEN * kernel_lib.WIDEN_STEP)
    assert recent == pytest.approx((23.5, 7.5))
    for _ in range(40):  # repeats all along: up to the bound, not past it
        widen, recent = kernel_lib.next_widen(widen, recent, hits=20, repeats=10)
    assert widen == kernel_lib.WIDEN_RANGE[1]
    widen, recent = kernel_lib.next_widen(widen, recent, hits=20, repeats=0)
    assert widen == kernel_lib.WIDEN_RANGE[1]  # the earlier repeats still weigh
    for _ in range(60):  # no repeats: down to the prior's own width
        widen, recent = kernel_lib.next_widen(widen, recent, hits=20, repeats=0)
    assert widen == kernel_lib.WIDEN_RANGE[0]
    held = kernel_lib.next_widen(1.3, (100.0, 2.0), hits=20, repeats=0)[0]
    assert held == 1.3  # inside the band: kept


def test_a_wider_draw_spreads_around_the_same_kernel():
    kernels = kernel_lib.Kernels(np.zeros((1, 3), np.float32), np.ones((1, 3), np.float32),
                                 np.array([0.2]), seed=1)
    chosen, prior_z = np.zeros(4000, np.int64), np.zeros((4000, 3), np.float32)
    narrow, wide = kernels.draw(chosen, prior_z), kernels.draw(chosen, prior_z, widen=2.0)
    assert narrow.std() == pytest.approx(1.0, rel=0.05) and wide.std() == pytest.approx(
        2.0, rel=0.05)
