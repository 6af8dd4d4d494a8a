"""Autotune configs of the attention kernel: a few per (head dim, BF16/FP8), chosen by the H200 sweep
(`benchmarks/attention.py sweep`, numbers in kernels/NOTES.md); `prune` keeps one launch key's configs.

Every config listed was run on the H200 and its output checked against the fp64 reference.
"""

import triton

from . import env

# FP8 scales are per tile, so the FP8 kernel's tiles are fixed per head dim and shared with the quantizer.
# d64/d128: 64-row tiles, one warpgroup per program and two programs per SM (+15% at d128, +40% at d64 over
# 128x128 with two warpgroups: the two programs' barriers are independent, so softmax and wgmma overlap).
FP8_BLOCKS = {64: (64, 128), 128: (64, 128), 256: (128, 128)}
INTERPRET_BLOCKS = (16, 32)  # unequal, like the FP8 tiles on the GPU, so that a swap of the two shows


def _config(block_m, block_n, warps, stages):
    return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps, num_stages=stages)


# (head dim, fp8) -> configs, fastest first (FA3FP8_AUTOTUNE=0 takes the first)
TUNED = {
    (64, False): [_config(128, 64, 4, 3), _config(128, 128, 8, 3), _config(128, 64, 8, 3)],
    (128, False): [_config(128, 128, 8, 3), _config(128, 64, 8, 3), _config(64, 64, 4, 3)],
    (256, False): [_config(128, 64, 8, 2), _config(64, 64, 4, 3)],
    (64, True): [_config(64, 128, 4, 3)],
    (128, True): [_config(64, 128, 4, 3), _config(64, 128, 4, 2)],
    (256, True): [_config(128, 128, 8, 3), _config(128, 128, 8, 2)],
}


def _signature(config: triton.Config):
    return tuple(sorted(config.kwargs.items())), config.num_warps, config.num_stages


CONFIGS = list({_signature(c): c for tuned in TUNED.values() for c in tuned}.values())


def fp8_blocks(d: int) -> tuple[int, int]:
    """(block_m, block_n): the FP8 tile, which is also the quantization block of Q and of K/V."""
    return INTERPRET_BLOCKS if env.interpreting() else FP8_BLOCKS[d]


def prune(configs, named_args, **kwargs):
    """Autotune's early pruning hook: the tuned configs of this launch's key, in TUNED's order (only the first
    with FA3FP8_AUTOTUNE=0)."""
    d, fp8 = named_args["D"], named_args["IS_FP8"]
    kept = [c for t in TUNED[(d, fp8)] for c in configs if _signature(c) == _signature(t)]
    return kept if env.autotune() else kept[:1]


def interpret_config() -> triton.Config:
    """The small single config used under TRITON_INTERPRET (many tiles on small test shapes)."""
    return _config(*INTERPRET_BLOCKS, 4, 1)
