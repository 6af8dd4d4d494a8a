// BF16/FP16 d64, in a unit of its own so that adding it leaves the other kernels' unit as it was: 128-key tiles
// (Q and K/V rows are one 128-byte panel each), a ring of four stages (16 KB per K or V tile), two consumers or three
// (192 rows, as FlashAttention-3 runs this head dim), each in order or overlapped; one CTA per work tile causal,
// persistent without a mask; no pairs, folds, tail split or windows (the C entry refuses them at d64).

#include "attn_sm90.cuh"

namespace fa3fp8 {

constexpr int D64_BLOCK_N = 128;
constexpr int D64_STAGES = 4;

template <class E>
cudaError_t launch_16bit_d64(bool causal, int loop, int consumers, const Launch& l) {
  using Out = typename E::Out;
  if (consumers == 3) return launch_loop<E, 64, D64_BLOCK_N, D64_STAGES, 3, Out>(causal, loop, l);
  if (consumers == 2) return launch_loop<E, 64, D64_BLOCK_N, D64_STAGES, 2, Out>(causal, loop, l);
  return UNSUPPORTED;
}

template cudaError_t launch_16bit_d64<BF16>(bool causal, int loop, int consumers, const Launch& l);
template cudaError_t launch_16bit_d64<FP16>(bool causal, int loop, int consumers, const Launch& l);

}  // namespace fa3fp8
