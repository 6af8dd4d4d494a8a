// BF16/FP16 d256 causal folds, in a unit of their own: ptxas's register-usage level 8 (cuda_build.UNITS) schedules
// their overlapped loop 1.4-3.3% faster at S 2K-8K on the H200; it leaves d256 without a mask 1-2% slower
// (kernels/NOTES.md, sessions 23 and 24).

#include "attn_sm90.cuh"

namespace fa3fp8 {

template <class E>
cudaError_t launch_16bit_d256_folds(const Launch& l) {
  return launch<E, 256, BLOCK_N_16BIT_D256, 2, 2, true, OVERLAP, typename E::Out, 1, true>(l);
}

template cudaError_t launch_16bit_d256_folds<BF16>(const Launch& l);
template cudaError_t launch_16bit_d256_folds<FP16>(const Launch& l);

}  // namespace fa3fp8
