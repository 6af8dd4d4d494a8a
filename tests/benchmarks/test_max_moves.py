"""benchmarks/max_moves.py: the warp vote's moves counted on scores built by hand, and its errors."""

import math

import pytest
import torch
from fa3fp8.testing import random_qkv


def warp_of(tile_maxima, block_n=4):
    """One warp's scores: every row alike, each tile's keys at -30 but one at the tile's max."""
    tiles = []
    for top in tile_maxima:
        tile = torch.full((16, block_n), -30.0)
        tile[:, 1] = top
        tiles.append(tile)
    return torch.cat(tiles, dim=1)


def test_a_tile_moves_the_max_only_past_the_slack(moves):
    # the first tile always moves (m = -inf); then +0.4 stays inside a slack of 0.5, +0.6 passes it
    scores = warp_of([0.0, 0.4, 1.0])
    assert moves.move_shares(scores, 4, [0.5, 1.5]) == {0.5: 2 / 3, 1.5: 1 / 3}


def test_one_row_moves_its_whole_warp_and_no_other(moves):
    scores = torch.cat([warp_of([0.0, -5.0, 0.3]), warp_of([0.0, 0.0, 0.0])])
    scores[3, 4:8] = 2.0  # one row of the first warp jumps in tile 1: that warp moves, the second does not
    assert moves.move_shares(scores, 4, [0.5]) == {0.5: 3 / 6}


def test_larger_slacks_move_no_more_often_on_the_bench_data(moves):
    shares = moves.move_shares(moves.bench_scores(64, 1024, 64), 128, [0.5, 1.5, 8.0])
    assert 1 / 8 <= shares[8.0] <= shares[1.5] <= shares[0.5] <= 1  # 8 key tiles: the first always moves
    assert shares[0.5] > shares[8.0]


def test_bench_scores_are_the_bench_datas_scaled_scores_in_base_2(moves):
    q, k, _ = random_qkv(1, 256, 256, 1, 1, 64, torch.bfloat16, "cpu", seed=256 + 64)
    natural = torch.softmax(q[0, :16, 0].double() @ k[0, :, 0].double().T / 8, dim=-1)
    base_2 = torch.softmax(moves.bench_scores(64, 256, 16).double() * math.log(2), dim=-1)
    torch.testing.assert_close(base_2, natural, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("shape, block_n, name", [((15, 8), 4, "scores"), ((16, 10), 4, "block_n"),
                                                  ((16, 8), 0, "block_n")])
def test_partial_warps_or_tiles_are_refused(moves, shape, block_n, name):
    with pytest.raises(ValueError, match=name):
        moves.move_shares(torch.zeros(shape), block_n, [0.5])
