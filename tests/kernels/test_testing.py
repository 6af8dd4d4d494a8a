"""fa3fp8.testing: the bit-for-bit comparison of quantizer outputs that the tests and benchmarks share."""

import torch

from fa3fp8.testing import same_quantized


def _output(tokens_used=3, heads=2, d=4, block=2, transposed=False):
    """A quantize_blocks-shaped output: data, scales with one unset tile past cu_blocks[-1], tile offsets."""
    gen = torch.Generator().manual_seed(0)
    tiles = tokens_used + 1
    shape = (heads, d, tiles * block) if transposed else (tokens_used * block, heads, d)
    data = torch.randint(-100, 100, shape, generator=gen, dtype=torch.int8).view(torch.float8_e4m3fn)
    scale = torch.rand(heads, tiles, generator=gen)
    return data, scale, torch.tensor([0, tokens_used], dtype=torch.int32)


def test_same_quantized_ignores_the_unset_tile_and_sees_one_byte():
    for transposed in (False, True):
        a = _output(transposed=transposed)
        b = tuple(t.clone() for t in a)
        b[1][:, -1] = 7.0  # past cu_blocks[-1]: unset
        if transposed:
            b[0].view(torch.int8)[..., -1] = 5  # V's columns past its last tile: unset too
        assert same_quantized(transposed, a, b)
        b[0].view(torch.int8)[0, 0, 0] += 1
        assert not same_quantized(transposed, a, b)


def test_same_quantized_sees_other_tile_offsets_and_scales():
    a = _output()
    assert not same_quantized(False, a, (a[0], a[1], torch.tensor([0, 2], dtype=torch.int32)))
    scale = a[1].clone()
    scale[0, 0] += 1
    assert not same_quantized(False, a, (a[0], scale, a[2]))
