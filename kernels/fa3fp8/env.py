"""Environment switches of fa3fp8: the one place that reads them (see docs/kernels.md)."""

import functools
import os

BACKENDS = ("auto", "triton", "reference")
KERNELS = ("auto", "triton", "cuda")


def backend() -> str:
    """`FA3FP8_BACKEND`: `auto` (Triton on Hopper or under TRITON_INTERPRET=1, else the PyTorch reference),
    `triton` (always the kernels) or `reference` (always the pure-PyTorch path)."""
    value = os.environ.get("FA3FP8_BACKEND", "auto").strip().lower()
    if value not in BACKENDS:
        raise ValueError(f"FA3FP8_BACKEND must be one of {BACKENDS}, got {value!r}")
    return value


def autotune() -> bool:
    """`FA3FP8_AUTOTUNE`: `1` (default) times the pruned configs once per key; `0` takes the first one."""
    return os.environ.get("FA3FP8_AUTOTUNE", "1").strip() not in ("0", "false", "no")


@functools.cache
def interpreting() -> bool:
    """True when Triton runs its CPU interpreter (`TRITON_INTERPRET=1`). Read once per process, as Triton reads it
    once, when its kernels are decorated at import (a quantize_qkv call asked 8 times: ~1 us each)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip() == "1"


def kernel() -> str:
    """`FA3FP8_KERNEL`: which Hopper forward kernel serves. `auto` (default): the CUDA C++ kernel where it measured
    faster (`attention_sm90.FASTER`, and causal sliding windows at d128/d256: `attention_sm90.serves_windows`) and
    nvcc or a built library is there, the Triton kernel otherwise; `triton` (also what the CPU interpreter runs);
    `cuda` (the CUDA C++ kernel at d64/d128/d256, BF16, FP16 and FP8, causal sliding windows included at d128/d256,
    built with nvcc on first use)."""
    value = os.environ.get("FA3FP8_KERNEL", "auto").strip().lower()
    if value not in KERNELS:
        raise ValueError(f"FA3FP8_KERNEL must be one of {KERNELS}, got {value!r}")
    return value


def cache_dir() -> str:
    """`FA3FP8_CACHE_DIR`: where the CUDA kernel library is built (default `~/.cache/fa3fp8`)."""
    return os.environ.get("FA3FP8_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "fa3fp8")


def cuda_home() -> str:
    """`CUDA_HOME` (default `/usr/local/cuda`): where nvcc is looked for when neither the pinned `cuda-build` wheels
    nor PATH have one."""
    return os.environ.get("CUDA_HOME") or "/usr/local/cuda"


def nvcc() -> str | None:
    """`FA3FP8_NVCC`: the nvcc to build the CUDA kernel library with instead of the pinned one (default none: see
    `cuda_build.nvcc`), for trying another compiler. The library's name does not follow the compiler, so such a build
    wants a `FA3FP8_CACHE_DIR` of its own."""
    value = os.environ.get("FA3FP8_NVCC", "").strip()
    if value and not os.path.isfile(value):
        raise ValueError(f"FA3FP8_NVCC must name an nvcc executable, got {value!r}")
    return value or None


def nvcc_flags() -> tuple[str, ...]:
    """`FA3FP8_NVCC_FLAGS`: more nvcc options for the CUDA kernel library (space-separated, default none), such as an
    experiment's `-D` switch in csrc or ptxas options. They are part of the library's name, so each set of options
    builds and loads a library of its own."""
    return tuple(os.environ.get("FA3FP8_NVCC_FLAGS", "").split())
