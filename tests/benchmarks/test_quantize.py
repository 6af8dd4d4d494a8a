"""benchmarks/quantize.py, the parts that run without a GPU: the bit-for-bit comparison of quantizer outputs and the
byte count."""

import torch


def _output(tokens_used=3, heads=2, d=4, block=2, transposed=False):
    """A quantize_blocks-shaped output: data, scales with one unset tile past cu_blocks[-1], tile offsets."""
    gen = torch.Generator().manual_seed(0)
    tiles = tokens_used + 1
    shape = (heads, d, tiles * block) if transposed else (tokens_used * block, heads, d)
    data = torch.randint(-100, 100, shape, generator=gen, dtype=torch.int8).view(torch.float8_e4m3fn)
    scale = torch.rand(heads, tiles, generator=gen)
    return data, scale, torch.tensor([0, tokens_used], dtype=torch.int32)


def test_same_output_ignores_the_unset_tile_and_sees_one_byte(quant):
    for part in ("Q", "V"):
        a = _output(transposed=part == "V")
        b = tuple(t.clone() for t in a)
        b[1][:, -1] = 7.0  # past cu_blocks[-1]: unset
        if part == "V":
            b[0].view(torch.int8)[..., -1] = 5  # V's columns past its last tile: unset too
        assert quant.same_output(part, a, b), part
        b[0].view(torch.int8)[0, 0, 0] += 1
        assert not quant.same_output(part, a, b), part


def test_layer_bytes_counts_bf16_in_e4m3_out_and_a_scale_per_block(quant):
    x = torch.empty(128, 2, 64, dtype=torch.bfloat16)
    assert quant.layer_bytes(x, 64) == 3 * 128 * 2 * 64 + 4 * 2 * 2
