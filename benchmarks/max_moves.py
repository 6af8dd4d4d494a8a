"""How often the online softmax's running max moves, by slack: the share of a warp's key tiles whose vote rescales O
and l. In csrc/attn_sm90.cuh's online_softmax a warp's 16 rows keep their running max m until one row's tile max
passes its m by more than the slack (E::MAX_SLACK); then every row of the warp takes max(m, its tile max), and the
tile rescales O (d/2 multiplies a thread: 64 at d128) and l. FP8's slack is 2.5 binades (0.5 before session 46),
16-bit's 8. Without a mask, on one head drawn as the bench draws its data (`fa3fp8.testing.random_qkv`
with the bench's seed; one head of batch 1, so the same distribution, not the bench's very tensors), on the CPU:

    python benchmarks/max_moves.py [--d 128] [--seqlen 16384] [--rows 1024] [--block-n 128] [--slacks 0.5,1.5,2.5]
"""

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))

from fa3fp8.testing import random_qkv  # noqa: E402

WARP_ROWS = 16  # the rows of one warp's accumulators (a consumer warpgroup's 64 rows in four warps)


def move_shares(scores: torch.Tensor, block_n: int, slacks: list[float]) -> dict[float, float]:
    """Base-2 scores (rows, keys), whole warps of rows and whole tiles of `block_n` keys -> {slack: the share of
    (warp, key tile) steps in which the warp's running max moves}."""
    rows, keys = scores.shape
    if rows % WARP_ROWS:
        raise ValueError(f"scores: {rows} rows are not whole warps of {WARP_ROWS}")
    if block_n <= 0 or keys % block_n:
        raise ValueError(f"block_n: {keys} keys are not whole tiles of {block_n}")
    tile_max = scores.reshape(rows, keys // block_n, block_n).amax(-1)
    steps = tile_max.shape[1] * (rows // WARP_ROWS)
    shares = {}
    for slack in slacks:
        m = torch.full((rows,), -math.inf, dtype=scores.dtype)
        moves = 0
        for j in range(tile_max.shape[1]):
            moved = (tile_max[:, j] > m + slack).view(-1, WARP_ROWS).any(-1)
            m = torch.where(moved.repeat_interleave(WARP_ROWS), torch.maximum(m, tile_max[:, j]), m)
            moves += int(moved.sum())
        shares[slack] = moves / steps
    return shares


def bench_scores(d: int, seqlen: int, rows: int) -> torch.Tensor:
    """The first `rows` queries' base-2 scores over `seqlen` keys of one BF16 head drawn as the bench draws its data."""
    q, k, _ = random_qkv(1, seqlen, seqlen, 1, 1, d, torch.bfloat16, "cpu", seed=seqlen + d)
    return (q[0, :rows, 0].float() @ k[0, :, 0].float().T) * (math.log2(math.e) / math.sqrt(d))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--seqlen", type=int, default=16384)
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--block-n", type=int, default=128)
    parser.add_argument("--slacks", default="0.5,1.5,2.5,3.5,8")
    args = parser.parse_args()
    if not 0 < args.rows <= args.seqlen:
        parser.error("--rows: between 1 and --seqlen")
    slacks = [float(s) for s in args.slacks.split(",")]
    shares = move_shares(bench_scores(args.d, args.seqlen, args.rows), args.block_n, slacks)
    print(f"d{args.d} S{args.seqlen}, {args.rows} rows, {args.block_n}-key tiles: share of warp-tiles whose m moves")
    for slack, share in shares.items():
        print(f"  slack {slack:4g}: {share:.3f}")


if __name__ == "__main__":
    main()
