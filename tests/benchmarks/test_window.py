"""benchmarks/window.py, the parts that run without a GPU: its FLOP count and its runners on the reference path."""

import pytest
import torch

from fa3fp8.reference import attention_reference
from fa3fp8.testing import random_qkv


@pytest.mark.parametrize("seqlen,window", [(1, 1), (10, 1), (10, 4), (10, 10), (10, 30), (300, 64), (300, None)])
def test_visible_pairs_count_what_a_causal_sliding_window_mask_keeps(window_bench, seqlen, window):
    rows, cols = torch.arange(seqlen)[:, None], torch.arange(seqlen)[None, :]
    mask = (cols <= rows) & ((rows - cols < window) if window is not None else True)
    assert window_bench.visible_pairs(seqlen, window) == mask.sum().item()
    assert window_bench.window_flops(seqlen, window, heads=2, d=8) == 4 * 2 * 8 * mask.sum().item()


def test_runners_are_the_named_impls_and_the_windowed_ones_keep_the_window(window_bench):
    # on the CPU fa3fp8 runs its reference: the BF16 runner must equal the reference with the same window, the full
    # one the reference without it (FlexAttention is compiled on first call, the CUDA launcher needs the GPU: both
    # left to the GPU run, whose check compares every windowed runner with fp64 first)
    q, k, v = random_qkv(1, 40, 40, 4, 2, 128, torch.bfloat16, "cpu", seed=2)
    named = window_bench.runners(q, k, v, window=8)
    assert tuple(named) == window_bench.IMPLS
    assert "cuda-bf16" not in window_bench.runners(*(x[..., :64] for x in (q, k, v)), window=8)  # d64: Triton only
    windowed, _ = attention_reference(q, k, v, causal=True, window_size=(7, -1))
    full, _ = attention_reference(q, k, v, causal=True)
    torch.testing.assert_close(named["fa3fp8-bf16"]().float(), windowed, atol=1e-2, rtol=0)
    torch.testing.assert_close(named["fa3fp8-bf16-full"]().float(), full, atol=1e-2, rtol=0)
    assert (named["fa3fp8-fp8"]().float() - windowed).abs().max() < 0.2


def test_plot_writes_a_png(window_bench, tmp_path):
    rows = [dict(impl=impl, seqlen=seqlen, window=w, tflops=float(w))
            for impl in window_bench.IMPLS for seqlen in (16384, 65536) for w in (1024, 4096)]
    window_bench.plot(rows, tmp_path / "window.png")
    assert (tmp_path / "window.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
