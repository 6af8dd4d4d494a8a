"""Autotune configs of the attention kernel, pruned per (head dim, dtype) by `keep`.

Every config listed here was run on the H200 and its output checked against the fp64 reference
(benchmarks/gpu_check.sh); warp-specialized configs that gave NaN there are left out.
"""

import triton

from . import env

# FP8 scales are per tile, so the FP8 kernel's tiles are fixed per head dim and shared with the quantizer.
FP8_BLOCKS = {64: (128, 128), 128: (128, 128), 256: (128, 128)}
INTERPRET_BLOCKS = (32, 32)
SMEM_BYTES = 227 * 1024


def _config(block_m, block_n, warps, stages, warp_spec=False):
    return triton.Config(
        {"BLOCK_M": block_m, "BLOCK_N": block_n, "WARP_SPEC": warp_spec}, num_warps=warps, num_stages=stages
    )


CONFIGS = [
    _config(128, 128, 8, 2),
    _config(128, 128, 8, 3),
    _config(128, 64, 8, 2),
    _config(128, 64, 8, 3),
    _config(128, 64, 4, 3),
    _config(64, 64, 4, 3),
    _config(128, 128, 8, 2, True),
    _config(128, 64, 8, 2, True),
]


def fp8_blocks(d: int) -> tuple[int, int]:
    """(block_m, block_n): the FP8 tile, which is also the quantization block of Q and of K/V."""
    return INTERPRET_BLOCKS if env.interpreting() else FP8_BLOCKS[d]


def smem_bytes(block_m: int, block_n: int, stages: int, d: int, elem: int) -> int:
    """Shared memory of one program: the Q tile plus `stages` K and V tiles."""
    return elem * d * (block_m + 2 * stages * block_n)


def keep(config: triton.Config, d: int, fp8: bool) -> bool:
    """Whether `config` suits head dim `d` (fits shared memory; FP8 tiles match the quantization blocks)."""
    kw = config.kwargs
    if fp8 and (kw["BLOCK_M"], kw["BLOCK_N"]) != fp8_blocks(d):
        return False
    elem = 1 if fp8 else 2
    return smem_bytes(kw["BLOCK_M"], kw["BLOCK_N"], config.num_stages, d, elem) <= SMEM_BYTES


def prune(configs, named_args, **kwargs):
    """Autotune's early pruning hook: the configs that `keep` accepts for this launch."""
    kept = [c for c in configs if keep(c, named_args["D"], named_args["IS_FP8"])]
    return kept if env.autotune() else kept[:1]


def interpret_config() -> triton.Config:
    """The small single config used under TRITON_INTERPRET (many tiles on small test shapes)."""
    return _config(*INTERPRET_BLOCKS, 4, 1)
