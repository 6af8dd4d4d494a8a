// FP8 (e4m3) forward attention for Hopper (sm_90a), FlashAttention-3's structure in CUDA C++.
//
// One CTA computes 128 (or 192) query rows of one (sequence, head): a producer warpgroup streams Q and a ring of
// K/V tiles into shared memory with TMA (128-byte swizzle, mbarrier completion); two (or three) consumer
// warpgroups of 64 rows each run S = Q·Kᵀ and O += P·V on wgmma (S from shared memory, P from registers) with the
// online softmax between. OVERLAP issues Q·Kᵀ of tile j before P·V of tile j-1 and computes softmax(j) while that
// P·V runs (FlashAttention-3, section 3.2); without it each tile's steps run in order.
// Input is the quantized bundle of fa3fp8.quantize_qkv: e4m3 Q (T, H, D) and K (T, Hkv, D), V transposed tile by
// tile (Hkv, D, n_blocks_k * 128), one fp32 scale per (head, tile). Engineering log: kernels/NOTES.md, session 3.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <stdint.h>

#include <type_traits>

namespace {

constexpr int WG_ROWS = 64;       // query rows per consumer warpgroup; a CTA has 2 or 3 consumers
constexpr int BLOCK_N = 128;      // keys per K/V tile: the bundle's K/V quantization block
constexpr int PANEL = 128;        // bytes per swizzled row: a tile is a stack of [rows x 128 B] panels
constexpr float P_SHIFT = 8.f;    // P is scaled by 2^8 into e4m3's normal range (reference.P_SHIFT)

struct Params {
  void* out;
  float* lse;
  const float* q_scale;
  const float* k_scale;
  const float* v_scale;
  const int* cu_q;
  const int* cu_k;
  const int* cu_bq;
  const int* cu_bk;
  int heads;
  int kv_heads;
  int total_q;
  int n_blocks_q;
  int n_blocks_k;
  int q_block;
  float qk_scale_log2;
};

template <int D, int BM, int STAGES>
struct alignas(1024) SharedStorage {
  uint8_t q[BM * D];
  uint8_t k[STAGES][BLOCK_N * D];
  uint8_t v[STAGES][D * BLOCK_N];
  uint64_t q_full;
  uint64_t k_full[STAGES];
  uint64_t v_full[STAGES];
  uint64_t empty[STAGES];
};

// ------------------------------------------------------------------------------------------ PTX wrappers

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int col, int row, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(smem_addr(dst)), "l"(map), "r"(col), "r"(row), "r"(smem_addr(bar))
      : "memory");
}

// wgmma shared-memory descriptor of a K-major operand in 128-byte-swizzled [rows x 128 B] panels: rows step by
// 128 B inside groups of 8, groups by 1024 B (the stride byte offset); the leading byte offset is unused.
__device__ __forceinline__ uint64_t smem_desc(const void* p) {
  const uint64_t addr = smem_addr(p);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Registers that an asynchronous wgmma reads or writes: the empty asm keeps the compiler from moving their uses
// across the issue or the wait (the wgmma asm statements alone only order against each other).
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

#define FA_F4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define FA_F16(d, i) FA_F4(d, i), FA_F4(d, i + 4), FA_F4(d, i + 8), FA_F4(d, i + 12)
#define FA_F64(d) FA_F16(d, 0), FA_F16(d, 16), FA_F16(d, 32), FA_F16(d, 48)
#define FA_ACC64                                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "  \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "   \
  "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "   \
  "%62, %63}"

#define FA_W4(d, i) "=f"(d[i]), "=f"(d[i + 1]), "=f"(d[i + 2]), "=f"(d[i + 3])
#define FA_W16(d, i) FA_W4(d, i), FA_W4(d, i + 4), FA_W4(d, i + 8), FA_W4(d, i + 12)
#define FA_W64(d) FA_W16(d, 0), FA_W16(d, 16), FA_W16(d, 32), FA_W16(d, 48)

// acc (64 x 128, fp32) = A (64 x 32, shared) · B (32 x 128, shared), e4m3. The accumulator is write-only here:
// as an input it would tie this wgmma to whatever last wrote those registers (the previous tile's softmax), and
// ptxas then serializes every wgmma of the kernel.
__device__ __forceinline__ void wgmma_ss_first(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " FA_ACC64 ", %64, %65, p, 1, 1;\n}\n"
      : FA_W64(d)
      : "l"(desc_a), "l"(desc_b), "r"(0));
}

// acc (64 x 128, fp32) += A (64 x 32, shared) · B (32 x 128, shared), e4m3
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " FA_ACC64 ", %64, %65, 1, 1, 1;\n"
      : FA_F64(d)
      : "l"(desc_a), "l"(desc_b));
}

// acc (64 x 128, fp32) += A (64 x 32, registers) · B (32 x 128, shared), e4m3
__device__ __forceinline__ void wgmma_rs(float (&d)[64], const uint32_t* a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " FA_ACC64 ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : FA_F64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_e4m3x2(float lo, float hi) {
  return __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3);
}

// ------------------------------------------------------------------------------------------ consumer math

// Per thread: rows g and g+8 of its warp's 16 (g = lane / 4), and in each 8-column group the columns 2t, 2t+1
// (t = lane % 4): accumulator register c8 * 4 + i * 2 + j holds (row g + 8i, column 8 * c8 + 2t + j).
struct RowState {
  float m[2];  // running max (base 2, scaled), -inf before the first key
  float l[2];  // this thread's part of the running sum (reduced over the quad in the epilogue)
};

// Reduction of a row's 32 values held by one thread: 8 independent chains then a tree. With two consumer warps per
// scheduler there is little to hide latency behind, and one 32-long dependent chain costs ~130 cycles.
template <typename Op>
__device__ __forceinline__ float reduce_row(const float (&s)[64], int i, Op op) {
  float part[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) part[c] = op(s[c * 4 + i * 2], s[c * 4 + i * 2 + 1]);
#pragma unroll
  for (int c8 = 8; c8 < 16; ++c8) part[c8 - 8] = op(part[c8 - 8], op(s[c8 * 4 + i * 2], s[c8 * 4 + i * 2 + 1]));
#pragma unroll
  for (int width = 4; width > 0; width /= 2)
#pragma unroll
    for (int c = 0; c < width; ++c) part[c] = op(part[c], part[c + width]);
  return part[0];
}

// Online softmax of one raw score tile (FlashAttention-2 rescaling, base 2) into p = 2^(s·scale - m + P_SHIFT),
// written back into s. Returns the factor alpha per row that rescales what was accumulated before.
template <bool MASKED, bool CAUSAL>
__device__ __forceinline__ void online_softmax(float (&s)[64], RowState& st, float scale, float (&alpha)[2],
                                               int n0, int row0, int seqlen_k, int diag) {
  const int t = threadIdx.x % 4;
  auto fmax = [](float a, float b) { return fmaxf(a, b); };
  auto add = [](float a, float b) { return a + b; };
  if (MASKED) {
    // diagonal band / ragged end: key n is visible to query row when n < seqlen_k and n <= row + diag
#pragma unroll
    for (int r = 0; r < 64; ++r) {
      const int key = n0 + 8 * (r / 4) + 2 * t + r % 2;
      const bool visible = key < seqlen_k && (!CAUSAL || key <= row0 + 8 * ((r / 2) % 2) + diag);
      s[r] = visible ? s[r] * scale : -INFINITY;
    }
  }
  float mx[2], offset[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) mx[i] = reduce_row(s, i, fmax);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffff, mx[i], 1));
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffff, mx[i], 2));
    const float m_new = fmaxf(st.m[i], MASKED ? mx[i] : mx[i] * scale);
    const float m_use = (MASKED && m_new == -INFINITY) ? 0.f : m_new;
    offset[i] = P_SHIFT - m_use;
    alpha[i] = ex2(st.m[i] - m_use);
    st.m[i] = m_new;
  }
#pragma unroll
  for (int r = 0; r < 64; ++r) {
    const int i = (r / 2) % 2;
    s[r] = ex2(MASKED ? s[r] + offset[i] : fmaf(s[r], scale, offset[i]));
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) st.l[i] = st.l[i] * alpha[i] + reduce_row(s, i, add);
}

// P (fp32, accumulator layout) -> e4m3 A fragments of the P·V wgmma, one group of four registers per 32 keys.
// The A fragment wants keys 4t..4t+3 and 16+4t..16+4t+3 of each row, while the accumulator gave this thread
// keys {8c + 2t, 8c + 2t + 1}: each 4-byte A register gathers two key pairs from lanes 2(t % 2) and 2(t % 2) + 1
// of the quad, the low or high pair of their packed registers by t / 2.
__device__ __forceinline__ void pack_p(const float (&p)[64], uint32_t (&a)[16]) {
  const int lane = threadIdx.x % 32;
  const int t = lane % 4;
  const int src = (lane & ~3) | ((t & 1) * 2);
  const uint32_t sel = (t >> 1) ? 0x7632 : 0x5410;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      uint32_t pair[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = (4 * kk + c) * 4 + i * 2;
        pair[c] = pack_e4m3x2(p[r], p[r + 1]);
      }
      const uint32_t w01 = pair[0] | (pair[1] << 16);
      const uint32_t w23 = pair[2] | (pair[3] << 16);
      const uint32_t lo0 = __shfl_sync(0xffffffff, w01, src);
      const uint32_t lo1 = __shfl_sync(0xffffffff, w01, src + 1);
      const uint32_t hi0 = __shfl_sync(0xffffffff, w23, src);
      const uint32_t hi1 = __shfl_sync(0xffffffff, w23, src + 1);
      a[kk * 4 + i] = __byte_perm(lo0, lo1, sel);
      a[kk * 4 + 2 + i] = __byte_perm(hi0, hi1, sel);
    }
  }
}

template <int D, int BM>
__device__ __forceinline__ void issue_qk(float (&s)[64], const uint8_t* q_wg, const uint8_t* k_tile) {
#pragma unroll
  for (int kk = 0; kk < D / 32; ++kk) {
    const int panel = kk / 4, col = (kk % 4) * 32;
    const uint64_t desc_q = smem_desc(q_wg + panel * BM * PANEL + col);
    const uint64_t desc_k = smem_desc(k_tile + panel * BLOCK_N * PANEL + col);
    if (kk == 0)
      wgmma_ss_first(s, desc_q, desc_k);
    else
      wgmma_ss(s, desc_q, desc_k);
  }
}

// O (64 x D as D/128 accumulators of 64 x 128) += P (64 x 128 keys) · V, V tile stored transposed (D x 128 keys)
template <int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 128][64], const uint32_t (&a)[16], const uint8_t* vt_tile) {
#pragma unroll
  for (int nb = 0; nb < D / 128; ++nb) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      wgmma_rs(o[nb], &a[kk * 4], smem_desc(vt_tile + nb * 128 * PANEL + kk * 32));
    }
  }
}

template <int D>
__device__ __forceinline__ void scale_o(float (&o)[D / 128][64], const float (&f)[2]) {
#pragma unroll
  for (int nb = 0; nb < D / 128; ++nb)
#pragma unroll
    for (int r = 0; r < 64; ++r) o[nb][r] *= f[(r / 2) % 2];
}

// ------------------------------------------------------------------------------------------ the kernel

template <int D, int CONSUMERS, bool CAUSAL, bool OVERLAP, int STAGES, typename OutT>
__global__ void __launch_bounds__(128 * (CONSUMERS + 1), 1)
    attn_fp8_fwd(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                 const __grid_constant__ CUtensorMap map_v, const Params p) {
  extern __shared__ uint8_t smem_raw[];
  constexpr int BLOCK_M = CONSUMERS * WG_ROWS;
  // registers per consumer thread after the producer gives its own back: 64K minus 24 per producer thread
  constexpr int CONSUMER_REGS = CONSUMERS == 2 ? 240 : 160;
  using Storage = SharedStorage<D, BLOCK_M, STAGES>;
  Storage& sm = *reinterpret_cast<Storage*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));

  const int m_blk = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // causal: longest rows first
  const int b = blockIdx.y / p.heads;
  const int h = blockIdx.y % p.heads;
  const int hk = h / (p.heads / p.kv_heads);
  const int q_start = p.cu_q[b];
  const int seqlen_q = p.cu_q[b + 1] - q_start;
  const int k_start = p.cu_k[b];
  const int seqlen_k = p.cu_k[b + 1] - k_start;
  const int m0 = m_blk * BLOCK_M;
  if (m0 >= seqlen_q) return;  // past this sequence's end (varlen): the whole CTA leaves
  const int diag = seqlen_k - seqlen_q;  // bottom-right causal alignment
  const int hi = CAUSAL ? max(min(seqlen_k, m0 + BLOCK_M + diag), 0) : seqlen_k;
  const int n_full = (CAUSAL ? max(min(seqlen_k, m0 + 1 + diag), 0) : seqlen_k) / BLOCK_N * BLOCK_N;
  const int n_tiles = (hi + BLOCK_N - 1) / BLOCK_N;
  const int kblk = hk * p.n_blocks_k + p.cu_bk[b];  // scale index of this sequence's first K/V tile

  if (threadIdx.x == 0) {
    mbar_init(&sm.q_full, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&sm.k_full[s], 1);
      mbar_init(&sm.v_full[s], 1);
      mbar_init(&sm.empty[s], 4 * CONSUMERS);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    // producer: one thread issues every TMA copy; the warpgroup gives its registers to the consumers
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    if (threadIdx.x != 0) return;
    mbar_expect_tx(&sm.q_full, BLOCK_M * D);
    for (int pn = 0; pn < D / PANEL; ++pn)
      tma_load(sm.q + pn * BLOCK_M * PANEL, &map_q, h * D + pn * PANEL, q_start + m0, &sm.q_full);
    const int vcol = p.cu_bk[b] * BLOCK_N;
    for (int j = 0; j < n_tiles; ++j) {
      const int s = j % STAGES;
      if (j >= STAGES) mbar_wait(&sm.empty[s], ((j / STAGES) & 1) ^ 1);
      mbar_expect_tx(&sm.k_full[s], BLOCK_N * D);
      for (int pn = 0; pn < D / PANEL; ++pn)
        tma_load(sm.k[s] + pn * BLOCK_N * PANEL, &map_k, hk * D + pn * PANEL, k_start + j * BLOCK_N, &sm.k_full[s]);
      mbar_expect_tx(&sm.v_full[s], D * BLOCK_N);
      tma_load(sm.v[s], &map_v, vcol + j * BLOCK_N, hk * D, &sm.v_full[s]);
    }
    return;
  }

  // consumers
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
  const int cw = wg - 1;
  const int tw = threadIdx.x % 128;
  const int lane = tw % 32;
  const int row0 = m0 + cw * WG_ROWS + (tw / 32) * 16 + lane / 4;  // this thread's rows: row0 and row0 + 8
  const int wg_m0 = m0 + cw * WG_ROWS;
  const float qs = wg_m0 < seqlen_q ? p.q_scale[h * p.n_blocks_q + p.cu_bq[b] + wg_m0 / p.q_block] : 1.f;
  const float qk_scale = p.qk_scale_log2 * qs;
  const uint8_t* q_wg = sm.q + cw * WG_ROWS * PANEL;

  float o[D / 128][64];
#pragma unroll
  for (int nb = 0; nb < D / 128; ++nb)
#pragma unroll
    for (int r = 0; r < 64; ++r) o[nb][r] = 0.f;
  RowState st = {{-INFINITY, -INFINITY}, {0.f, 0.f}};
  float s_acc[64];
  uint32_t pa[16];
  float alpha[2];
  float vs_prev = 1.f;

  mbar_wait(&sm.q_full, 0);

  // per-tile scales are read before the barrier waits so their latency hides behind the copies and wgmma
  const float* k_scale = p.k_scale + kblk;
  const float* v_scale = p.v_scale + kblk;
  auto softmax_tile = [&](int j, float ks) {
    if (j * BLOCK_N >= n_full)
      online_softmax<true, CAUSAL>(s_acc, st, qk_scale * ks, alpha, j * BLOCK_N, row0, seqlen_k, diag);
    else
      online_softmax<false, CAUSAL>(s_acc, st, qk_scale * ks, alpha, j * BLOCK_N, row0, seqlen_k, diag);
  };
  // O is kept in units of the current V tile's scale: O_true = O · vs
  auto rescale = [&](float vs) {
    const float f[2] = {alpha[0] * (vs_prev / vs), alpha[1] * (vs_prev / vs)};
    scale_o<D>(o, f);
    vs_prev = vs;
  };
  auto release = [&](int j) {
    if (lane == 0) mbar_arrive(&sm.empty[j % STAGES]);
  };
  auto wait_s = [&]() {
    fence_regs(s_acc);
  };
  auto wait_o = [&]() {
    fence_regs(pa);
    for (int nb = 0; nb < D / 128; ++nb) fence_regs(o[nb]);
  };

  if (OVERLAP) {
    if (n_tiles > 0) {
      const float ks = k_scale[0], vs = v_scale[0];
      mbar_wait(&sm.k_full[0], 0);
      wgmma_fence();
      issue_qk<D, BLOCK_M>(s_acc, q_wg, sm.k[0]);
      wgmma_commit();
      wgmma_wait<0>();
      wait_s();
      softmax_tile(0, ks);
      rescale(vs);
      pack_p(s_acc, pa);
    }
    for (int j = 1; j < n_tiles; ++j) {
      const int s = j % STAGES, sp = (j - 1) % STAGES;
      const float ks = k_scale[j], vs = v_scale[j];
      mbar_wait(&sm.k_full[s], (j / STAGES) & 1);
      mbar_wait(&sm.v_full[sp], ((j - 1) / STAGES) & 1);
      wait_o();
      wgmma_fence();
      issue_qk<D, BLOCK_M>(s_acc, q_wg, sm.k[s]);
      wgmma_commit();
      issue_pv<D>(o, pa, sm.v[sp]);
      wgmma_commit();
      wgmma_wait<1>();  // Q·Kᵀ(j) done; P·V(j-1) runs under the softmax
      wait_s();
      softmax_tile(j, ks);
      wgmma_wait<0>();
      wait_o();
      release(j - 1);
      rescale(vs);
      pack_p(s_acc, pa);
    }
    if (n_tiles > 0) {
      const int last = n_tiles - 1;
      mbar_wait(&sm.v_full[last % STAGES], (last / STAGES) & 1);
      wait_o();
      wgmma_fence();
      issue_pv<D>(o, pa, sm.v[last % STAGES]);
      wgmma_commit();
      wgmma_wait<0>();
      wait_o();
      release(last);
    }
  } else {
    for (int j = 0; j < n_tiles; ++j) {
      const int s = j % STAGES;
      const uint32_t phase = (j / STAGES) & 1;
      const float ks = k_scale[j], vs = v_scale[j];
      mbar_wait(&sm.k_full[s], phase);
      wgmma_fence();
      issue_qk<D, BLOCK_M>(s_acc, q_wg, sm.k[s]);
      wgmma_commit();
      wgmma_wait<0>();
      wait_s();
      softmax_tile(j, ks);
      rescale(vs);
      pack_p(s_acc, pa);
      mbar_wait(&sm.v_full[s], phase);
      wait_o();
      wgmma_fence();
      issue_pv<D>(o, pa, sm.v[s]);
      wgmma_commit();
      wgmma_wait<0>();
      wait_o();
      release(j);
    }
  }

  // epilogue: O · vs / l; fully masked rows (l = 0) give zeros and lse = -inf
  const int t = lane % 4;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float l = st.l[i];
    l += __shfl_xor_sync(0xffffffff, l, 1);
    l += __shfl_xor_sync(0xffffffff, l, 2);
    const int row = row0 + 8 * i;
    const float inv = l == 0.f ? 0.f : vs_prev / l;
    if (row < seqlen_q) {
      OutT* out = static_cast<OutT*>(p.out) + (size_t)(q_start + row) * p.heads * D + h * D;
#pragma unroll
      for (int nb = 0; nb < D / 128; ++nb)
#pragma unroll
        for (int c8 = 0; c8 < 16; ++c8) {
          const float x0 = o[nb][c8 * 4 + i * 2] * inv, x1 = o[nb][c8 * 4 + i * 2 + 1] * inv;
          const int col = nb * 128 + c8 * 8 + 2 * t;
          if constexpr (std::is_same_v<OutT, __nv_bfloat16>)
            *reinterpret_cast<__nv_bfloat162*>(out + col) = __floats2bfloat162_rn(x0, x1);
          else
            *reinterpret_cast<__half2*>(out + col) = __floats2half2_rn(x0, x1);
        }
      if (t == 0) p.lse[(size_t)h * p.total_q + q_start + row] = (st.m[i] - P_SHIFT + log2f(l)) * 0.6931471805599453f;
    }
  }
}

// ------------------------------------------------------------------------------------------ host side

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (fn == nullptr) {
    cudaDriverEntryPointQueryResult status;
    void* ptr = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status) ==
            cudaSuccess &&
        status == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }
  return fn;
}

// 2D byte tensor (rows x cols, row stride = cols) read in [box_rows x 128 B] boxes, 128-byte swizzle
bool make_map(CUtensorMap* map, const void* base, uint64_t rows, uint64_t cols, uint32_t box_rows) {
  auto encode = encode_tiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {cols};
  const cuuint32_t box[2] = {PANEL, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int D, int CONSUMERS, bool CAUSAL, bool OVERLAP, typename OutT>
cudaError_t launch(const CUtensorMap& mq, const CUtensorMap& mk, const CUtensorMap& mv, const Params& p, int batch,
                   int max_seqlen_q, cudaStream_t stream) {
  constexpr int STAGES = D == 128 ? 4 : 2;
  constexpr int BLOCK_M = CONSUMERS * WG_ROWS;
  auto kernel = attn_fp8_fwd<D, CONSUMERS, CAUSAL, OVERLAP, STAGES, OutT>;
  const int smem = sizeof(SharedStorage<D, BLOCK_M, STAGES>) + 1024;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  const dim3 grid((max_seqlen_q + BLOCK_M - 1) / BLOCK_M, batch * p.heads);
  kernel<<<grid, 128 * (CONSUMERS + 1), smem, stream>>>(mq, mk, mv, p);
  return cudaGetLastError();
}

template <int D, int CONSUMERS, bool CAUSAL, bool OVERLAP>
cudaError_t launch_out(bool out_bf16, const CUtensorMap& mq, const CUtensorMap& mk, const CUtensorMap& mv,
                       const Params& p, int batch, int max_seqlen_q, cudaStream_t stream) {
  return out_bf16 ? launch<D, CONSUMERS, CAUSAL, OVERLAP, __nv_bfloat16>(mq, mk, mv, p, batch, max_seqlen_q, stream)
                  : launch<D, CONSUMERS, CAUSAL, OVERLAP, __half>(mq, mk, mv, p, batch, max_seqlen_q, stream);
}

template <int D, int CONSUMERS>
cudaError_t launch_d(bool causal, bool overlap, bool out_bf16, const CUtensorMap& mq, const CUtensorMap& mk,
                     const CUtensorMap& mv, const Params& p, int batch, int max_seqlen_q, cudaStream_t stream) {
  if (causal)
    return overlap ? launch_out<D, CONSUMERS, true, true>(out_bf16, mq, mk, mv, p, batch, max_seqlen_q, stream)
                   : launch_out<D, CONSUMERS, true, false>(out_bf16, mq, mk, mv, p, batch, max_seqlen_q, stream);
  return overlap ? launch_out<D, CONSUMERS, false, true>(out_bf16, mq, mk, mv, p, batch, max_seqlen_q, stream)
                 : launch_out<D, CONSUMERS, false, false>(out_bf16, mq, mk, mv, p, batch, max_seqlen_q, stream);
}

}  // namespace

extern "C" {

// Returns 0 on success, -1 when a tensor map could not be made, -2 for an unsupported (head dim, consumers, overlap),
// else the CUDA error.
// overlap: softmax(j) runs under P·V(j-1); consumers: 2 or 3 warpgroups of 64 query rows (3: d128, in order).
int fa3fp8_attn_fp8_fwd(const void* q8, const void* k8, const void* v8t, void* out, float* lse, const float* q_scale,
                        const float* k_scale, const float* v_scale, const int* cu_q, const int* cu_k, const int* cu_bq,
                        const int* cu_bk, int batch, int heads, int kv_heads, int d, int total_q, int total_k,
                        int v_cols, int n_blocks_q, int n_blocks_k, int q_block, int max_seqlen_q, float qk_scale_log2,
                        int causal, int overlap, int consumers, int out_bf16, void* stream) {
  // three consumers only at d128 and in order (with softmax under P·V they run out of registers and spill)
  if ((d != 128 && d != 256) || (consumers != 2 && consumers != 3) || (consumers == 3 && (d != 128 || overlap)))
    return -2;
  CUtensorMap mq, mk, mv;
  if (!make_map(&mq, q8, total_q, (uint64_t)heads * d, consumers * WG_ROWS) ||
      !make_map(&mk, k8, total_k, (uint64_t)kv_heads * d, BLOCK_N) ||
      !make_map(&mv, v8t, (uint64_t)kv_heads * d, v_cols, d))
    return -1;
  const Params p{out,  lse,      q_scale, k_scale,    v_scale,    cu_q,    cu_k,         cu_bq, cu_bk,
                 heads, kv_heads, total_q, n_blocks_q, n_blocks_k, q_block, qk_scale_log2};
  auto s = static_cast<cudaStream_t>(stream);
  const bool c = causal != 0, o = overlap != 0, bf16 = out_bf16 != 0;
  cudaError_t err;
  if (d == 256)
    err = launch_d<256, 2>(c, o, bf16, mq, mk, mv, p, batch, max_seqlen_q, s);
  else if (consumers == 3)
    err = c ? launch_out<128, 3, true, false>(bf16, mq, mk, mv, p, batch, max_seqlen_q, s)
            : launch_out<128, 3, false, false>(bf16, mq, mk, mv, p, batch, max_seqlen_q, s);
  else
    err = launch_d<128, 2>(c, o, bf16, mq, mk, mv, p, batch, max_seqlen_q, s);
  return static_cast<int>(err);
}

const char* fa3fp8_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

}  // extern "C"
