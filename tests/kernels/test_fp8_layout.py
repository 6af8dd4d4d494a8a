"""The FP8 bundle's layout helpers (`fp8_layout.py`): per-sequence tile offsets and V's key permutation."""

import torch

from fa3fp8.fp8_layout import E4M3_MAX, block_offsets, permute_v_keys, pow2_scale, unpermute_v_keys, v_key_positions


def test_block_offsets_count_tiles_per_sequence():
    cu = torch.tensor([0, 5, 5, 300], dtype=torch.int32)
    offsets, bound = block_offsets(cu, 300, 128)
    assert offsets.tolist() == [0, 1, 1, 4]
    assert bound >= 4


def test_v_key_positions_match_the_p_registers_of_each_quad_lane():
    # lane t of a quad holds keys 2t, 2t+1, 8+2t, 9+2t (and 16 more) of a 32-key step after Q·Kᵀ; the P·V wgmma
    # reads its A registers as k-positions 4t..4t+3 (and 16 more): those positions must hold those keys
    positions = v_key_positions(torch.arange(256))
    assert sorted(positions.tolist()) == list(range(256))
    stored = torch.empty(256, dtype=torch.long)
    stored[positions] = torch.arange(256)
    for group in range(0, 256, 32):
        for t in range(4):
            for half in (0, 16):
                held = [group + half + c + 2 * t + j for c in (0, 8) for j in (0, 1)]
                assert stored[group + half + 4 * t : group + half + 4 * t + 4].tolist() == held


def test_permute_v_keys_moves_the_last_dim_and_round_trips():
    v8t = torch.randn(2, 3, 256).to(torch.float8_e4m3fn)
    permuted = permute_v_keys(v8t)
    assert torch.equal(permuted[..., v_key_positions(torch.arange(256))].float(), v8t.float())
    assert torch.equal(unpermute_v_keys(permuted).float(), v8t.float())


def test_pow2_scale_is_the_smallest_power_of_two_that_fits_e4m3():
    amax = torch.cat([torch.rand(1000) * 10.0 ** torch.randint(-8, 8, (1000,)), torch.tensor([448.0, 448.5, 1e-12])])
    scale = pow2_scale(amax)
    assert torch.equal(torch.exp2(torch.log2(scale.double()).round()), scale.double())
    ratio = amax.double() / scale.double()
    assert (ratio <= E4M3_MAX).all() and (ratio > E4M3_MAX / 2).all()
    assert pow2_scale(torch.tensor([448.0])).item() == 1.0
