"""``train.precision=auto``: mixed bfloat16 where the CPU computes it natively, else float32.

On CPUs with AVX512-BF16 or AMX (Intel Cooper Lake and Sapphire Rapids onwards, AMD Zen 4
onwards), oneDNN runs bfloat16 matrix products natively and ``mixed_bfloat16`` trains faster
with the same variables, loss and optimizer in float32 (``bench/latent_ablation.md`` compares the
demo trained both ways on one such CPU: validity, reconstruction and FCD). Elsewhere bfloat16 is
emulated and slower, so auto keeps float32. With a GPU visible auto also keeps float32: it has
not been measured there (set ``train.precision`` explicitly).
"""

from __future__ import annotations

import functools

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo names of native bfloat16


def cpu_bf16_flags(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, ...]:
    """The native-bfloat16 flags the CPU reports (empty where ``cpuinfo`` is unreadable: not
    Linux)."""
    try:
        with open(cpuinfo) as handle:
            for line in handle:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return tuple(flag for flag in BF16_CPU_FLAGS if flag in flags)
    except OSError:
        pass
    return ()


@functools.lru_cache(maxsize=None)
def _auto_choice() -> tuple[str, str]:
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        return "float32", "a GPU is visible (bfloat16 not measured there)"
    flags = cpu_bf16_flags()
    if flags:
        return "mixed_bfloat16", f"the CPU has {' and '.join(flags)}"
    return "float32", "the CPU has no native bfloat16 (avx512_bf16, amx_bf16)"


def resolve_precision(precision: str) -> str:
    """The Keras dtype policy a run computes in: ``precision`` itself, or for ``auto`` the
    choice for this machine."""
    return _auto_choice()[0] if precision == "auto" else precision


def describe_precision(precision: str) -> str:
    """``precision`` for the start line: the policy, and why when auto chose it."""
    if precision != "auto":
        return f"precision {precision}"
    choice, reason = _auto_choice()
    return f"precision {choice} (auto: {reason})"
