"""benchmarks/quantize.py, the parts that run without a GPU: the byte count."""

import torch


def test_layer_bytes_counts_bf16_in_e4m3_out_and_a_scale_per_block(quant):
    x = torch.empty(128, 2, 64, dtype=torch.bfloat16)
    assert quant.layer_bytes(x, 64) == 3 * 128 * 2 * 64 + 4 * 2 * 2
