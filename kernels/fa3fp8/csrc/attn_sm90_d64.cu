// Head dim 64, in a unit of its own so that adding it leaves the other kernels' unit as it was: 128-key tiles, a ring
// of four stages, two consumers or three (192 rows, as FlashAttention-3 runs this head dim), each in order or
// overlapped; one CTA per work tile causal (or folds, overlapped), persistent without a mask, split along the keys as
// d128's (splits_tail); no pairs or windows (the C entries refuse them at d64). BF16/FP16: every row of Q, K and V is
// one 128-byte panel (16 KB per K or V tile). FP8: Q and K rows are 64 bytes (64-byte swizzle, QK_PANEL), V
// transposed one [64 rows x 128 keys] panel a block (8 KB per K or V tile); P·V on m64n64 wgmma at both.

#include "attn_sm90.cuh"

namespace fa3fp8 {

constexpr int D64_BLOCK_N = 128;
constexpr int D64_STAGES = 4;

// fold: causal folds (persistent CTAs dealt a long and a short row block of one head) on the overlapped loop, as
// the C entries' d64_settings checked
template <class E, typename OutT>
cudaError_t launch_d64(bool causal, int loop, int consumers, bool fold, const Launch& l) {
  if (fold) {
    if (consumers == 3) return launch<E, 64, D64_BLOCK_N, D64_STAGES, 3, true, OVERLAP, OutT, 1, true>(l);
    if (consumers == 2) return launch<E, 64, D64_BLOCK_N, D64_STAGES, 2, true, OVERLAP, OutT, 1, true>(l);
    return UNSUPPORTED;
  }
  if (consumers == 3) return launch_loop<E, 64, D64_BLOCK_N, D64_STAGES, 3, OutT>(causal, loop, l);
  if (consumers == 2) return launch_loop<E, 64, D64_BLOCK_N, D64_STAGES, 2, OutT>(causal, loop, l);
  return UNSUPPORTED;
}

template cudaError_t launch_d64<BF16, BF16::Out>(bool causal, int loop, int consumers, bool fold, const Launch& l);
template cudaError_t launch_d64<FP16, FP16::Out>(bool causal, int loop, int consumers, bool fold, const Launch& l);
template cudaError_t launch_d64<E4M3, __nv_bfloat16>(bool causal, int loop, int consumers, bool fold, const Launch& l);
template cudaError_t launch_d64<E4M3, __half>(bool causal, int loop, int consumers, bool fold, const Launch& l);

}  // namespace fa3fp8
