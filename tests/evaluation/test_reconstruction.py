"""Tests for seqvae.evaluation.reconstruction (the Kusner et al. protocol) on a tiny run."""

from conftest import HELD_OUT as TEST

from seqvae.evaluation import reconstruction


def test_reconstruction_protocol_keys_and_ranges(run):
    result = reconstruction.reconstruction_protocol(run, TEST, n_molecules=5, n_encodings=2, n_decodings=3)
    assert result["molecules"] == 5
    assert (result["encodings_per_molecule"], result["decodings_per_encoding"]) == (2, 3)
    for key in ("reconstruction", "reconstructed_at_least_once", "valid_decodings",
                "token_accuracy_mean_z", "sequence_accuracy_mean_z"):
        assert 0.0 <= result[key] <= 1.0, key
    assert result["reconstructed_at_least_once"] >= result["reconstruction"]
    again = reconstruction.reconstruction_protocol(run, TEST, n_molecules=5, n_encodings=2, n_decodings=3)
    assert again == result  # seeded


def test_reconstruction_compares_canonical_smiles(run, monkeypatch):
    """Decodings are rows ``(d * E + e) * N + i``; a differently written SMILES still counts."""
    inputs = ["CCCO", "CCN"]
    other_spelling = {"CCCO": "OCCC", "CCN": "NCC"}

    def fake_decode(run, z, greedy, seed, grammar):
        assert not greedy and len(z) == 1 * 4 * len(inputs)
        return [other_spelling[inputs[row % 2]] if row < 2 else "" for row in range(len(z))]

    monkeypatch.setattr(reconstruction.inference, "decode", fake_decode)
    result = reconstruction.reconstruction_protocol(run, inputs, n_molecules=2, n_encodings=1, n_decodings=4)
    assert result["reconstruction"] == 0.25  # the first of four decodings of each molecule
    assert result["reconstructed_at_least_once"] == 1.0
    assert result["valid_decodings"] == 0.25


def test_interpolation_protocol_counts_inner_points(run, monkeypatch):
    result = reconstruction.interpolation_protocol(run, TEST, n_pairs=4, steps=5, seed=1)
    assert result["pairs"] == 4 and result["steps"] == 5
    assert 0.0 <= result["valid_intermediates"] <= 1.0
    assert 0.0 <= result["distinct_per_path"] <= 3.0
    assert result == reconstruction.interpolation_protocol(run, TEST, n_pairs=4, steps=5, seed=1)

    def fake_pairs(run, pairs, steps, grammar):  # ends come back; inner: valid, invalid, valid
        inner = ["CCO", "C1CC", "CCO"]
        return [[(0.0, a)] + [(0.5, t) for t in inner] + [(1.0, b)] for a, b in pairs]

    monkeypatch.setattr(reconstruction.inference, "interpolate_pairs", fake_pairs)
    result = reconstruction.interpolation_protocol(run, TEST, n_pairs=3, steps=5)
    assert result["valid_intermediates"] == 2 / 3
    assert result["distinct_per_path"] == 1.0
    assert result["ends_reconstructed"] == 1.0


def test_reconstruction_standard_error_is_over_molecules(run, monkeypatch):
    """Molecule 0 comes back in 2 of its 4 decodings, molecule 1 in none: rates 0.5 and 0,
    mean 0.25, standard error std([0.5, 0], ddof=1) / sqrt(2) = 0.25."""
    inputs = ["CCCO", "CCN"]

    def fake_decode(run, z, greedy, seed, grammar):
        return ["CCCO" if row in (0, 2) else "" for row in range(len(z))]  # row = d * 2 + i

    monkeypatch.setattr(reconstruction.inference, "decode", fake_decode)
    result = reconstruction.reconstruction_protocol(run, inputs, n_molecules=2, n_encodings=1,
                                                    n_decodings=4)
    assert result["reconstruction"] == 0.25
    assert abs(result["reconstruction_se"] - 0.25) < 1e-12
