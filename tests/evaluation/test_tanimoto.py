import numpy as np
import pytest

from seqvae.data import chemistry
from seqvae.evaluation import molecules, tanimoto
from seqvae.evaluation.tanimoto import aggregate_tanimoto


def _dense_tanimoto(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Tanimoto of every pair of packed fingerprints, from the unpacked bits in float64."""
    x, y = np.unpackbits(a, axis=1).astype(float), np.unpackbits(b, axis=1).astype(float)
    shared = x @ y.T
    union = x.sum(1)[:, None] + y.sum(1)[None, :] - shared
    with np.errstate(invalid="ignore"):
        return np.where(union > 0, shared / np.maximum(union, 1), 1.0)


def test_tanimoto_matches_rdkit_on_molecules():
    from rdkit import DataStructs
    from rdkit.Chem import rdFingerprintGenerator

    smiles = ["CCO", "CCN", "c1ccccc1", "Cc1ccccc1", "CC(=O)Oc1ccccc1C(=O)O", "C1CCNCC1", "CCCl"]
    mols = [chemistry.to_mol(s) for s in smiles]
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=1024)
    fps = [generator.GetFingerprint(m) for m in mols]
    expected = np.array([DataStructs.BulkTanimotoSimilarity(fp, fps) for fp in fps])
    bits = molecules.fingerprints(mols)
    weights = np.full(len(mols), 1 / len(mols))
    mean = aggregate_tanimoto(bits, bits, agg="mean", ref_weights=weights)
    np.testing.assert_allclose(mean, expected.mean(1), atol=1e-6)
    nearest_other = aggregate_tanimoto(bits[:2], bits[2:], agg="max")
    np.testing.assert_allclose(nearest_other, expected[:2, 2:].max(1), atol=1e-6)


@pytest.mark.parametrize("method", ["popcount", "matmul"])
@pytest.mark.parametrize("blocks", [(256, 32768), (4, 8)])  # one block; many, with padding
def test_blocks_and_padding_give_the_definition(monkeypatch, blocks, method):
    monkeypatch.setattr(tanimoto, "METHOD", method)
    monkeypatch.setattr(tanimoto, "GEN_BLOCK", blocks[0])
    monkeypatch.setattr(tanimoto, "REF_BLOCK", blocks[1])
    monkeypatch.setattr(tanimoto, "SMALLEST_BLOCKS", (min(32, blocks[0]), min(1024, blocks[1])))
    rng = np.random.default_rng(0)
    gen = np.packbits(rng.random((37, 1024)) < 0.05, axis=1)
    ref = np.packbits(rng.random((53, 1024)) < 0.05, axis=1)
    gen[3] = 0  # an empty fingerprint: similarity 1 to an empty reference, 0 to the others
    ref[10] = 0
    dense = _dense_tanimoto(gen, ref)
    assert dense[3, 10] == 1.0
    np.testing.assert_allclose(aggregate_tanimoto(gen, ref, agg="max"), dense.max(1), atol=1e-6)
    weights = rng.random(53)
    weights /= weights.sum()
    for p in (1, 2):
        mean = aggregate_tanimoto(gen, ref, agg="mean", p=p, ref_weights=weights)
        np.testing.assert_allclose(mean, (dense ** p @ weights) ** (1 / p), atol=1e-6)


def test_rejects_fingerprints_not_in_whole_words():
    with pytest.raises(ValueError, match="8k"):
        aggregate_tanimoto(np.zeros((2, 12), np.uint8), np.zeros((2, 12), np.uint8), agg="max")
    with pytest.raises(ValueError, match="agg"):
        aggregate_tanimoto(np.zeros((2, 8), np.uint8), np.zeros((2, 8), np.uint8), agg="min")


def test_the_bfloat16_product_gives_the_popcounts_values_exactly(monkeypatch):
    rng = np.random.default_rng(1)
    gen = np.packbits(rng.random((70, 1024)) < rng.uniform(0.01, 0.2, (70, 1)), axis=1)
    ref = np.packbits(rng.random((300, 1024)) < rng.uniform(0.01, 0.2, (300, 1)), axis=1)
    gen[0], ref[0] = 0, 0
    gen[1, :32], gen[1, 32:] = 255, 0  # 256 bits set, all shared with ref[1]: the largest count
    ref[1] = gen[1]
    ref[2, :31], ref[2, 31:] = 255, 0  # 248 of them
    assert np.unpackbits(np.concatenate([gen, ref]), axis=1).sum(1).max() == 256
    weights = np.full(len(ref), 1 / len(ref))
    results = {}
    for method in ("popcount", "matmul"):
        monkeypatch.setattr(tanimoto, "METHOD", method)
        assert tanimoto._use_matmul(gen, ref) == (method == "matmul")
        results[method] = (aggregate_tanimoto(gen, ref, agg="max"),
                           aggregate_tanimoto(gen, ref, agg="mean", p=2, ref_weights=weights))
    np.testing.assert_array_equal(results["popcount"][0], results["matmul"][0])
    np.testing.assert_allclose(results["popcount"][1], results["matmul"][1], rtol=1e-6)


def test_auto_takes_the_product_only_with_amx_and_counts_bfloat16_holds(monkeypatch):
    few = np.packbits(np.eye(8, 1024, dtype=bool), axis=1)
    many = few.copy()
    many[0] = 255  # 1,024 bits set: a count bfloat16 cannot hold exactly
    monkeypatch.setattr(tanimoto, "_cpu_bf16_flags", lambda: ("avx512_bf16",))
    assert not tanimoto._use_matmul(few, few)
    monkeypatch.setattr(tanimoto, "_cpu_bf16_flags", lambda: ("avx512_bf16", "amx_bf16"))
    assert tanimoto._use_matmul(few, few)
    assert not tanimoto._use_matmul(few, many) and not tanimoto._use_matmul(many, few)
    monkeypatch.setattr(tanimoto, "METHOD", "matmul")
    assert not tanimoto._use_matmul(many, few)  # forced, still never inexact
    np.testing.assert_array_equal(aggregate_tanimoto(many, few, agg="max"),
                                  _dense_tanimoto(many, few).max(1).astype(np.float32))
    monkeypatch.setattr(tanimoto, "METHOD", "fastest")
    with pytest.raises(ValueError, match="METHOD"):
        aggregate_tanimoto(few, few, agg="max")
