"""train.precision=auto: the CPU's native bfloat16 decides, and the run says what it chose."""

import pytest
from conftest import tiny_config, with_train

from seqvae.model import precision
from seqvae.training.loop import train
from seqvae.training.steps import build_training


@pytest.fixture
def cpu(tmp_path, monkeypatch):
    """Sets the CPU flags auto reads (a fake /proc/cpuinfo) and forgets the cached choice."""
    def set_flags(flags: str | None):
        path = tmp_path / "cpuinfo"
        if flags is not None:
            path.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
        real = precision.cpu_bf16_flags
        monkeypatch.setattr(precision, "cpu_bf16_flags", lambda: real(str(path)))
        precision._auto_choice.cache_clear()
    yield set_flags
    precision._auto_choice.cache_clear()


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile amx_bf16 amx_int8\n")
    assert precision.cpu_bf16_flags(str(path)) == ("avx512_bf16", "amx_bf16")
    path.write_text("flags\t\t: fpu avx2 fma avx512f\n")
    assert precision.cpu_bf16_flags(str(path)) == ()
    assert precision.cpu_bf16_flags(str(tmp_path / "missing")) == ()


@pytest.mark.parametrize("flags, expected", [("fpu avx2 amx_bf16", "mixed_bfloat16"),
                                             ("fpu avx512f avx512_bf16", "mixed_bfloat16"),
                                             ("fpu avx2 fma", "float32"),
                                             (None, "float32")])  # unreadable: not Linux
def test_auto_takes_bfloat16_only_where_the_cpu_has_it(cpu, flags, expected):
    cpu(flags)
    assert precision.resolve_precision("auto") == expected
    assert precision.describe_precision("auto").startswith(f"precision {expected} (auto: ")
    for explicit in ("float32", "mixed_bfloat16", "mixed_float16"):
        assert precision.resolve_precision(explicit) == explicit
        assert precision.describe_precision(explicit) == f"precision {explicit}"


@pytest.mark.parametrize("flags, compute_dtype", [("avx2 amx_bf16", "bfloat16"), ("avx2", "float32")])
def test_an_auto_run_computes_in_the_chosen_precision_and_keeps_float32_weights(cpu, flags,
                                                                               compute_dtype):
    cpu(flags)
    model, _, _ = build_training(with_train(tiny_config(), precision="auto"), 10, 12, 10)
    assert {layer.dtype_policy.compute_dtype for layer in model._flatten_layers()
            if layer.weights} == {compute_dtype}
    assert {v.dtype for v in model.trainable_variables} == {"float32"}


def test_the_start_line_names_the_precision_auto_chose(cpu, tmp_path, smiles, capsys):
    cpu("avx2 amx_bf16")
    config = with_train(tiny_config(), precision="auto", max_steps=2, epochs=1)
    summary = train(config, str(tmp_path / "run"), smiles)
    assert summary["steps"] == 2
    assert "precision mixed_bfloat16 (auto: the CPU has amx_bf16)" in capsys.readouterr().err


def test_the_presets_choose_by_the_cpu_and_moses_original_stays_float32():
    from seqvae.presets import preset_config

    assert {name: preset_config(name).train.precision for name in
            ("demo", "user", "moses", "moses_original")} == {
        "demo": "auto", "user": "auto", "moses": "auto", "moses_original": "float32"}
