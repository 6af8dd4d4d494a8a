"""The warp-specialized Gluon kernel compiled for sm_90 without a GPU (its GPU runs are in test_attention_gpu.py):
every head dim, BF16 and FP8, causal and not, must compile, fit in shared memory and use the Hopper machinery it
is written around (TMA, mbarriers, asynchronous wgmma, register reallocation between partitions)."""

import pytest

from fa3fp8 import attention_ws

CASES = [(d, fp8, causal) for d in (64, 128, 256) for fp8 in (False, True) for causal in (False, True)]
H100_SHARED_MEMORY = 227 * 1024


@pytest.mark.parametrize("d,fp8,causal", CASES, ids=[f"D{d}-{'fp8' if f else 'bf16'}-{'causal' if c else 'full'}"
                                                     for d, f, c in CASES])
def test_compiles_for_hopper(d, fp8, causal):
    compiled = attention_ws.compile_offline(d, fp8, causal, heads=8, kv_heads=2)
    ptx = compiled.asm["ptx"]
    assert compiled.metadata.shared <= H100_SHARED_MEMORY
    assert "cp.async.bulk.tensor" in ptx  # TMA loads
    assert "wgmma.mma_async" in ptx and "wgmma.wait_group" in ptx
    assert "setmaxnreg" in ptx  # the loader gives its registers to the consumers
    assert "mbarrier.try_wait" in ptx


def test_supported_tiles():
    assert attention_ws.supported(128, False)
    assert attention_ws.supported(128, True, block_n=128)
    assert not attention_ws.supported(128, True, block_n=64)  # FP8 scales are per K/V tile: tiles must agree
    assert not attention_ws.supported(96, False)
