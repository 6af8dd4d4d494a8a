// Forward attention for Hopper (sm_90a) in CUDA C++ with FlashAttention-3's structure: FP8 (e4m3) and BF16/FP16.
//
// A persistent CTA per SM (causal: a CTA per work tile, see launch) computes work tiles of 128 (or 192) query rows of
// one (sequence, head) in turn: a producer warpgroup streams Q and a ring of K/V tiles into shared memory with TMA
// (128-byte swizzle, 64-byte for FP8 d64's Q and K rows; mbarrier completion); two (or three) consumer warpgroups of 64
// rows each run S = Q·Kᵀ and O += P·V on wgmma (S from shared memory, P from registers) with the online softmax
// between. The loop (Loop below) runs each tile's steps in order, or issues Q·Kᵀ of tile j before P·V of tile j-1 and
// computes softmax(j) while that P·V runs (FlashAttention-3, section 3.2). K and V slots are released separately (K
// after its Q·Kᵀ, V after its P·V), so the producer refills a K slot while P·V still reads V, and it loads the next
// work tile's Q and first K/V tiles while the consumers finish the current one. A persistent launch's last round that
// would leave CTAs idle (no causal mask, or causal folds of equal-length sequences), and a causal launch of fewer work
// tiles than CTAs fit at once (a few queries over a long context) or its last round (of up to split_rounds), is split
// along the keys over all of them, and merge_segments combines the parts (TailSplit).
//
// FP8 input is the quantized bundle of fa3fp8.quantize_qkv: e4m3 Q (T, H, D) and K (T, Hkv, D), V transposed tile
// by tile (Hkv, D, n_blocks_k * 128) with its keys permuted within 32-key groups (see pack_p), one fp32 scale per
// (head, 128-key block), V's scales powers of two; a K/V tile is one block or two. 16-bit input is Q, K, V as they
// are, and wgmma reads the V tile (keys x D, D contiguous) transposed from shared memory.
// This header holds the kernels and launch<>(), which makes a kernel's launch; attn_sm90.cu picks the kernel for
// the C entries' arguments, and units of their own compile some kernels with other ptxas options
// (cuda_build.UNITS). Engineering log: kernels/NOTES.md (from session 3).

#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <stdint.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "timeline.cuh"

namespace fa3fp8 {

constexpr int WG_ROWS = 64;  // query rows per consumer warpgroup; a CTA has 2 or 3 consumers
constexpr int PANEL = 128;   // bytes per swizzled row: a tile is a stack of [rows x 128 B] panels
constexpr int KV_BLOCK = 128;  // keys per quantization block of an FP8 bundle's K and V
constexpr int BLOCK_N_16BIT_D128 = 176;  // keys per BF16/FP16 K/V tile (see launch_16bit)
constexpr int BLOCK_N_16BIT_D256 = 80;

// O's accumulator: D / O_COLS<D> wgmma results of 64 rows x O_COLS<D> columns, O_COLS<D> / 2 registers a thread each
template <int D>
constexpr int O_COLS = D < 128 ? D : 128;

// Bytes of a swizzled row of Q or K in shared memory: a 128-byte panel, or the whole row where it is shorter (FP8
// d64: 64-byte rows, 64-byte swizzle)
template <class E, int D>
constexpr int QK_PANEL = D * E::BYTES < PANEL ? D * E::BYTES : PANEL;

// Operand types of the tensor cores. FP8 reads per-tile scales and V transposed, and shifts P into e4m3's normal range;
// the 16-bit types read Q, K, V as they are.
// MAX_SLACK: how far (base 2) a tile's row max may pass the running max before O and l are rescaled (below).
// FP8 bounds P by 2^(P_SHIFT + MAX_SLACK) = 2^8.5 = 362, inside e4m3's 448. A shift of 6 with a slack of 2.5, rather
// than 8 (the reference's) with 0.5, keeps P's rounding but for the smallest (subnormal) values, while a warp's m moves
// in 2.4% of its tiles instead of 16% on data drawn as the bench's at S16K (benchmarks/max_moves.py), so O and l are
// rescaled less often: FP8 +0.1-1.8% at d128, +1.6-4.4% at d256 (H100, session 46; a third binade was level).
struct E4M3 {
  static constexpr int BYTES = 1;
  static constexpr bool FP8 = true;
  static constexpr float P_SHIFT = 6.f;
  static constexpr float MAX_SLACK = 2.5f;
};
static_assert(E4M3::P_SHIFT + E4M3::MAX_SLACK < 8.8f, "P must stay below e4m3's largest value, 448 = 2^8.807");
static_assert(E4M3::P_SHIFT == static_cast<int>(E4M3::P_SHIFT), "a shift of whole binades keeps P's rounding");
template <typename T>
struct Half {
  static constexpr int BYTES = 2;
  static constexpr bool FP8 = false;
  static constexpr float P_SHIFT = 0.f;
  static constexpr float MAX_SLACK = 8.f;
  using Out = T;
};
using BF16 = Half<__nv_bfloat16>;
using FP16 = Half<__half>;

// Consumer loop: SERIAL runs Q·Kᵀ(j), softmax(j), P·V(j) in order; OVERLAP issues Q·Kᵀ(j) with P·V(j-1) and runs
// softmax(j) under that P·V.
enum Loop { SERIAL = 0, OVERLAP = 1 };

// FP8 only: the three scale arrays, cu_bq / cu_bk (each sequence's first Q / K tile), n_blocks_q / n_blocks_k and
// q_block; the 16-bit path leaves them null or 0. m_blocks (row blocks of the longest sequence) and work_tiles
// (m_blocks x batch x heads) are set at launch.
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
  int m_blocks;
  int work_tiles;
  int window_left;  // WINDOW kernels: the keys a query sees before its own (a causal sliding window of window_left + 1)
#if FA3FP8_TIMELINE
  Timeline timeline;  // where attn_fwd records its clock (timeline.cuh)
#endif
};

// Tail split (see plan_split): the work tiles from `from` on, `units` work units (a CTA's work tile, a pair's two, or
// a fold's two) that would leave CTAs idle in a last round, are cut along their key_tiles key tiles (a fold: its two
// work tiles' key tiles in turn, at most key_tiles) into segments, the parts that each of the `grid` CTAs takes of
// their units x key_tiles tile iterations; a segment's normalized O and lse go to o / lse, and merge_segments
// combines them. from = the launch's work_tiles: nothing is split. A causal launch of one CTA per work tile instead
// cuts the key tiles of each unit of its last round into `parts` segments of equal length (grid: the launch's CTAs,
// one per work tile before `from`, then units x parts x CLUSTER).
struct TailSplit {
  float* o;
  float* lse;
  int from;
  int units;
  int key_tiles;
  int grid;
  int items;  // work items of a CTA's loop: the work tiles before `from`, then 2 x grid segments (causal: grid)
  int parts;
};

// A launch of `work_tiles` work tiles that splits nothing
__host__ __device__ constexpr TailSplit unsplit(int work_tiles) {
  return TailSplit{nullptr, nullptr, work_tiles, 0, 0, 0, work_tiles, 0};
}

// One unit of a CTA's work: BLOCK_M query rows of one (sequence, head) and the key tiles they see.
// A segment of the tail split is a work tile whose keys start key0 keys into the sequence (k_start, seqlen_k, diag
// and n_full count from there) and that writes its partial result to slot `split`; a whole work tile has key0 = 0
// and split = -1. A WINDOW work tile starts at its window's first key tile (key0).
struct WorkTile {
  int b, h, hk, q_start, seqlen_q, k_start, seqlen_k, m0, diag, n_full, n_tiles, key0, split;
};

// Kernels whose producer hands the consumers each work tile it looked up, through shared memory (two slots, one
// barrier each), so that the consumers skip the lookup: its divisions and dependent cu_seqlens loads took 0.84 us of
// each work tile's ~3 us fixed cost between one work item's end and the next one's start (benchmarks/timeline.py, H100,
// FP8 d128 S4K, session 59). The producer publishes work item i at its top, where it has seen Q of item i - 2
// released, so every consumer warp has read that slot (and waited on its barrier) before; after its last item it
// publishes w = -1, the end. H100, session 60, kernel_ab (7 rounds, S4K / S16K and a ragged batch): causal FP8 d128
// +1.0-2.3%, BF16 d128 / d256 +0.1-2.0%, FP8 d256 -0.4% to +0.6% (its pairs then build a wgmma descriptor through
// R2UR: it goes without); without a mask -1% to -11% (BF16 d128 three consumers). Windows and d64 were not timed with
// it and go without.
template <class E, int D, bool CAUSAL, bool WINDOW>
constexpr bool SHARED_TILES = CAUSAL && !WINDOW && (D == 128 || (D == 256 && !E::FP8));

template <int Q_BYTES, int TILE_BYTES, int STAGES>
struct alignas(1024) SharedStorage {
  uint8_t q[Q_BYTES];
  uint8_t k[STAGES][TILE_BYTES];
  uint8_t v[STAGES][TILE_BYTES];
  uint64_t q_full;
  uint64_t q_empty;
  uint64_t k_full[STAGES];
  uint64_t v_full[STAGES];
  uint64_t k_empty[STAGES];
  uint64_t v_empty[STAGES];
  uint64_t o_free;        // O_IN_V: the consumers' O has left the V slots (o_in_v)
  uint64_t tile_full[2];  // SHARED_TILES: work item i's slot i % 2 is written
  int tile_w[2];          // its w (-1: no more work items)
  WorkTile tile[2];
};

// A CTA's shared memory: Q, and STAGES K and V tiles of BLOCK_N keys
template <class E, int D, int BLOCK_N, int STAGES, int CONSUMERS>
using StorageFor = SharedStorage<CONSUMERS * WG_ROWS * D * E::BYTES, BLOCK_N * D * E::BYTES, STAGES>;

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

// the same copy into the same offset of every CTA in `cta_mask` (of the cluster); each CTA's barrier at `bar`'s offset
// counts the bytes that land in it
__device__ __forceinline__ void tma_load_multicast(void* dst, const CUtensorMap* map, int col, int row, uint64_t* bar,
                                                   uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;"
      ::"r"(smem_addr(dst)), "l"(map), "r"(col), "r"(row), "r"(smem_addr(bar)), "h"(cta_mask)
      : "memory");
}

// a copy of the [rows x 128 B] box at `src` to global memory, in the thread's bulk group, committed
__device__ __forceinline__ void tma_store(const void* src, const CUtensorMap* map, int col, int row) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
               ::"l"(map), "r"(col), "r"(row), "r"(smem_addr(src))
               : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// wait until this thread's committed stores have read their shared memory (READ) or are done
template <bool READ>
__device__ __forceinline__ void tma_store_wait() {
  if constexpr (READ)
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  else
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// this thread's shared-memory writes, seen by the copies (TMA) issued after the next barrier
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// the 128 threads of consumer warpgroup `cw` (0-2) wait for each other: named barriers 1-3 (0 is __syncthreads');
// the ids are immediates, as a register id spilled (session 16)
__device__ __forceinline__ void warpgroup_sync(int cw) {
  if (cw == 0)
    asm volatile("bar.sync 1, 128;" ::: "memory");
  else if (cw == 1)
    asm volatile("bar.sync 2, 128;" ::: "memory");
  else
    asm volatile("bar.sync 3, 128;" ::: "memory");
}

// four 8x8 matrices of 16-bit values to shared memory: register i of each thread holds its two values of matrix i
// (row lane / 4, columns 2 (lane % 4) and + 1, as wgmma's accumulators lay them out); lane 8i + r gives the address
// of row r of matrix i
__device__ __forceinline__ void stmatrix_x4(void* dst, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
               ::"r"(smem_addr(dst)), "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// arrive on the barrier at `bar`'s offset in the shared memory of CTA `cta` of the cluster
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t cta) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}"
      ::"r"(smem_addr(bar)), "r"(cta)
      : "memory");
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
}

// every consumer warpgroup of a CTA of CONSUMERS waits for the others: named barrier 4
template <int CONSUMERS>
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 4, %0;" ::"n"(128 * CONSUMERS) : "memory");
}

// wgmma shared-memory descriptor of an operand in 128-byte-swizzled [rows x 128 B] panels (or 64-byte-swizzled [rows
// x 64 B] ones, `panel` 64): rows step by `panel` bytes inside groups of 8, groups by 8 x `panel` bytes (the stride
// byte offset). K-major operands (rows along M/N, a panel of K per row) leave the leading byte offset unused;
// MN-major ones (rows along K, 128 B of M/N per row) step from one 128-byte column of M/N to the next by `leading`
// bytes.
__device__ __forceinline__ uint64_t smem_desc(const void* p, uint32_t leading = 16, uint32_t panel = PANEL) {
  const uint64_t addr = smem_addr(p);
  const uint64_t swizzle = panel == PANEL ? 1 : 2;  // the descriptor's layout type: 128- or 64-byte swizzle
  return ((addr & 0x3FFFF) >> 4) | (uint64_t(leading >> 4) << 16) | (uint64_t(8 * panel >> 4) << 32) |
         (swizzle << 62);
}

// The descriptor of the operand `bytes` (a multiple of 16, a constant once unrolled) past `base`: shared addresses
// stay below 2^18, so the start address field (bits 0-13, in 16-byte units) takes the offset without a carry. One
// add per wgmma, where a descriptor made anew from the address (FRESH) is five to eleven instructions.
template <bool FRESH>
__device__ __forceinline__ uint64_t desc_at(const uint8_t* base, uint64_t base_desc, uint32_t bytes,
                                            uint32_t leading = 16) {
  if constexpr (FRESH) return smem_desc(base + bytes, leading);
  return (base_desc & 0xFFFFFFFF00000000ull) | (static_cast<uint32_t>(base_desc) + (bytes >> 4));
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

// Accumulator operand lists: 32, 40, 64, 88 or 128 fp32 registers, read-write (FA_RW) or write-only (FA_WO).
#define FA_RW(x) "+f"(x)
#define FA_WO(x) "=f"(x)
#define FA_R4(c, d, i) c(d[i]), c(d[i + 1]), c(d[i + 2]), c(d[i + 3])
#define FA_R8(c, d, i) FA_R4(c, d, i), FA_R4(c, d, i + 4)
#define FA_R16(c, d, i) FA_R8(c, d, i), FA_R8(c, d, i + 8)
#define FA_R32(c, d) FA_R16(c, d, 0), FA_R16(c, d, 16)
#define FA_R40(c, d) FA_R32(c, d), FA_R8(c, d, 32)
#define FA_R64(c, d) FA_R32(c, d), FA_R16(c, d, 32), FA_R16(c, d, 48)
#define FA_R88(c, d) FA_R64(c, d), FA_R16(c, d, 64), FA_R8(c, d, 80)
#define FA_R128(c, d) FA_R64(c, d), FA_R16(c, d, 64), FA_R16(c, d, 80), FA_R16(c, d, 96), FA_R16(c, d, 112)
#define FA_ACC32                                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "       \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FA_ACC40                                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "       \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}"
#define FA_ACC64                                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "  \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "   \
  "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "   \
  "%62, %63}"
#define FA_ACC88                                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "       \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "        \
  "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "        \
  "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, "        \
  "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87}"
#define FA_ACC128                                                                                              \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "  \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "   \
  "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "   \
  "%62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, "   \
  "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, "       \
  "%101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, "       \
  "%117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

// S (64 x N, fp32) = Q (64 x K, shared) · Kᵀ (K x N, shared), both K-major: `first` overwrites S, `add` adds to it.
// In `first` the accumulator is write-only: as an input it would tie this wgmma to whatever last wrote those
// registers (the previous tile's softmax), and ptxas then serializes every wgmma of the kernel. TAIL: the 16-bit
// forms' transpose flags (none: both K-major); FP8 has none.
template <class E, int N>
struct WgmmaQK;
#define FA_WGMMA_QK(E, N, INSTR, TAIL, ACC, REGS, IA, IB, IP)                                                \
  template <>                                                                                                \
  struct WgmmaQK<E, N> {                                                                                     \
    __device__ __forceinline__ static void first(float (&d)[N / 2], uint64_t a, uint64_t b) {                \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IP ", 0;\n" INSTR " " ACC ", %" IA ", %" IB          \
                   ", p, 1, 1" TAIL ";\n}\n"                                                                 \
                   : REGS(FA_WO, d)                                                                          \
                   : "l"(a), "l"(b), "r"(0));                                                                \
    }                                                                                                        \
    __device__ __forceinline__ static void add(float (&d)[N / 2], uint64_t a, uint64_t b) {                  \
      asm volatile(INSTR " " ACC ", %" IA ", %" IB ", 1, 1, 1" TAIL ";\n" : REGS(FA_RW, d) : "l"(a), "l"(b)); \
    }                                                                                                        \
  };
#define FA_WGMMA_QK_16BIT(N, ACC, REGS, IA, IB, IP)                                                          \
  FA_WGMMA_QK(BF16, N, "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16", ", 0, 0", ACC, REGS, IA,   \
              IB, IP)                                                                                        \
  FA_WGMMA_QK(FP16, N, "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16", ", 0, 0", ACC, REGS, IA, IB, \
              IP)

FA_WGMMA_QK(E4M3, 128, "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", "", FA_ACC64, FA_R64, "64", "65",
            "66")
FA_WGMMA_QK(E4M3, 256, "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3", "", FA_ACC128, FA_R128, "128",
            "129", "130")
FA_WGMMA_QK_16BIT(80, FA_ACC40, FA_R40, "40", "41", "42")
FA_WGMMA_QK_16BIT(128, FA_ACC64, FA_R64, "64", "65", "66")
FA_WGMMA_QK_16BIT(176, FA_ACC88, FA_R88, "88", "89", "90")

// O (64 x N, fp32) += P (64 x K, registers) · V (K x N, shared), N = O_COLS<D>. TAIL: the 16-bit forms read V
// MN-major (transpose flag 1); FP8 reads it K-major (the bundle stores V transposed).
template <class E, int N>
struct WgmmaPV;
#define FA_WGMMA_PV(E, N, INSTR, TAIL, ACC, REGS, IA, IB, IP)                                                 \
  template <>                                                                                                \
  struct WgmmaPV<E, N> {                                                                                     \
    __device__ __forceinline__ static void add(float (&d)[N / 2], const uint32_t* a, uint64_t b) {           \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IP ", 0;\n" INSTR " " ACC ", " IA ", %" IB ", p, 1, 1" TAIL \
                   ";\n}\n"                                                                                  \
                   : REGS(FA_RW, d)                                                                          \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));                            \
    }                                                                                                        \
  };
#define FA_WGMMA_PV_16BIT(N, ACC, REGS, IA, IB, IP)                                                          \
  FA_WGMMA_PV(BF16, N, "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16", ", 1", ACC, REGS, IA, IB, IP) \
  FA_WGMMA_PV(FP16, N, "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.f16.f16", ", 1", ACC, REGS, IA, IB, IP)

FA_WGMMA_PV(E4M3, 128, "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", "", FA_ACC64, FA_R64,
            "{%64, %65, %66, %67}", "68", "69")
FA_WGMMA_PV(E4M3, 64, "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3", "", FA_ACC32, FA_R32,
            "{%32, %33, %34, %35}", "36", "37")
FA_WGMMA_PV_16BIT(128, FA_ACC64, FA_R64, "{%64, %65, %66, %67}", "68", "69")
FA_WGMMA_PV_16BIT(64, FA_ACC32, FA_R32, "{%32, %33, %34, %35}", "36", "37")

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// natural-log LSE of a row from its running max m (base 2, shifted by E::P_SHIFT) and its sum l
template <class E>
__device__ __forceinline__ float row_lse(float m, float l) {
  return (m - E::P_SHIFT + log2f(l)) * 0.6931471805599453f;
}

__device__ __forceinline__ uint32_t pack_e4m3x2(float lo, float hi) {
  return __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3);
}

template <typename T>
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// ------------------------------------------------------------------------------------------ consumer math

// Per thread: rows g and g+8 of its warp's 16 (g = lane / 4), and in each 8-column group the columns 2t, 2t+1
// (t = lane % 4): accumulator register c8 * 4 + i * 2 + j holds (row g + 8i, column 8 * c8 + 2t + j).
struct RowState {
  float m[2];  // running max (base 2, scaled), -inf before the first key
  float l[2];  // this thread's part of the running sum (reduced over the quad in the epilogue)
};

// Reduction of a row's values held by one thread in 8-column groups g0 .. g0 + GROUPS - 1 (2 per group; g0 is a
// constant once unrolled): 8 independent chains then a tree. With two consumer warps per scheduler there is little
// to hide latency behind, and one 32-long dependent chain costs ~130 cycles.
template <int GROUPS, int NREGS, typename Op>
__device__ __forceinline__ float reduce_row(const float (&s)[NREGS], int g0, int i, Op op) {
  static_assert(GROUPS >= 8 && GROUPS * 4 <= NREGS, "at least 64 keys, inside the tile");
  float part[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) part[c] = op(s[(g0 + c) * 4 + i * 2], s[(g0 + c) * 4 + i * 2 + 1]);
#pragma unroll
  for (int c8 = 8; c8 < GROUPS; ++c8)
    part[c8 % 8] = op(part[c8 % 8], op(s[(g0 + c8) * 4 + i * 2], s[(g0 + c8) * 4 + i * 2 + 1]));
#pragma unroll
  for (int width = 4; width > 0; width /= 2)
#pragma unroll
    for (int c = 0; c < width; ++c) part[c] = op(part[c], part[c + width]);
  return part[0];
}

// The row max of an unmasked tile of one block of keys as the signed-integer max of the scores' bit patterns, three
// at a time (VIMNMX3, sm_90's DPX), where FMNMX takes two: 17 instructions a row of 32 values instead of 31, and a
// shallower chain to the exponentials (FMNMX was 12.6% of FP8 d128's loop samples, session 48). For floats of which
// one is >= 0 the integer max is the float max; over negative floats alone it is their minimum, so a row whose
// integer max is negative while its running max is below 0 takes the float reduction again (online_softmax). H100,
// session 63, kernel_ab (two runs of 5 rounds, bit-identical outputs): FP8 d128 +0.0-2.0% (causal S16K +1.9% /
// +4.7%), d256 +1.1-4.7%, d64 +2.2-4.2%; 16-bit d128 without a mask +1.0-2.1%, d64 +0.4-2.2%, d256 level. Left out
// where it lost: 16-bit d128 causal (three consumers, one CTA or paired, -4.4% to -4.9% at S16K / 64K; folds level)
// and FP8 d64's causal kernels of one CTA per work tile (-3.2% at S16K). Sliding windows (session 64, 7 rounds,
// windows of 1024 / 4096 keys): FP8 d128 +1.0-1.7%, d256 +1.7-3.0%, BF16 d256 level. Masked tiles keep the float max:
// by the integer max too they were level (0.983-1.021x, session 64), being 1-3% of a causal row block's tiles.
template <class E, int D, bool CAUSAL, bool FOLD>
constexpr bool MAX_BY_BITS = !(CAUSAL && (E::FP8 ? D == 64 && !FOLD : D == 128));

// The signed-integer max of v's first N values: three at a time, level by level (a level's last two take a
// two-input max, its last one goes up alone)
template <int N, int M>
__device__ __forceinline__ int max3_tree(const int (&v)[M]) {
  if constexpr (N == 1) {
    return v[0];
  } else {
    constexpr int K = (N + 2) / 3;
    int w[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (3 * k + 2 < N)
        w[k] = __vimax3_s32(v[3 * k], v[3 * k + 1], v[3 * k + 2]);
      else if (3 * k + 1 < N)
        w[k] = max(v[3 * k], v[3 * k + 1]);
      else
        w[k] = v[3 * k];
    }
    return max3_tree<K>(w);
  }
}

// The largest bit pattern, as a signed integer, of row i's values that one thread holds (2 per 8-column group)
template <int GROUPS, int NREGS>
__device__ __forceinline__ int row_max_bits(const float (&s)[NREGS], int i) {
  int v[2 * GROUPS];
#pragma unroll
  for (int c = 0; c < GROUPS; ++c)
#pragma unroll
    for (int j = 0; j < 2; ++j) v[2 * c + j] = __float_as_int(s[c * 4 + i * 2 + j]);
  return max3_tree<2 * GROUPS>(v);
}

// x combined by op over the quad of threads that holds one accumulator row (lanes 4q .. 4q + 3)
template <typename T, typename Op>
__device__ __forceinline__ T quad_reduce(T x, Op op) {
  x = op(x, __shfl_xor_sync(0xffffffff, x, 1));
  return op(x, __shfl_xor_sync(0xffffffff, x, 2));
}

// Online softmax of one raw score tile (FlashAttention-2 rescaling, base 2) into p = 2^(s·scale - m + p_offset),
// written back into s; the row sums gain the tile's p times l_unit. A tile holds SB blocks of keys, each with its
// own scale, p_offset and l_unit (FP8: a 256-key tile is two quantization blocks). The running max m of this
// warp's rows moves only when some row's tile max passes it by more than E::MAX_SLACK (a warp vote): otherwise p
// stays below 2^(p_offset + slack), alpha is 1 and the caller skips rescaling O (FlashAttention-4's conditional
// rescale; O / l is exact either way). Returns whether m moved; alpha then rescales what was accumulated before.
// With LATE (LATE_ALPHA: FP8 in the overlapped loop, but d64's folds), alpha is left as its base-2 log and the row
// sums in tile_sum, for the caller's rescale to take the exponentials and l's update into the branch that rescales O.
// Otherwise ptxas predicates the two exponentials, which every tile then issues on the SFU (FP8 d128: 66 MUFU a tile
// for 64 scores, the SFU as busy as the tensor cores) whether m moved (2.4% of tiles at S16K) or not. H100, session
// 47: FP8 d128's overlapped loop +1.8-2.3%, d256 level to +1%, d64 causal S16K +8% but its folds -4%; the serial loop
// lost 1.4-2.9% with it, BF16 d256 6-9%, and 16-bit d64's three consumers spill 8 bytes.
template <class E, int D, int LOOP, bool FOLD>
constexpr bool LATE_ALPHA = E::FP8 && LOOP == OVERLAP && (D >= 128 || !FOLD);
template <class E, bool MASKED, bool CAUSAL, bool LATE, bool WINDOW = false, bool BITS = false, int NREGS, int SB>
__device__ __forceinline__ bool online_softmax(float (&s)[NREGS], RowState& st, const float (&scale)[SB],
                                               const float (&p_offset)[SB], const float (&l_unit)[SB],
                                               float (&alpha)[2], float (&tile_sum)[2], int n0, int row0,
                                               int seqlen_k, int diag, int window_left = 0) {
  static_assert(SB == 1 || SB == 2, "one or two blocks of keys per tile");
  constexpr int BLOCK_REGS = NREGS / SB, BLOCK_GROUPS = BLOCK_REGS / 4;
  const int t = threadIdx.x % 4;
  auto fmax = [](float a, float b) { return fmaxf(a, b); };
  auto add = [](float a, float b) { return a + b; };
  // 16-bit: the vote reads each thread's own part of a row's tile max (a quad's max passes a bound exactly when one of
  // its parts does) and the quad reduces it only when m moves, taking two shuffle rounds off the chain that leads to
  // the exponentials (BF16 d128 +0.5-1.9%). FP8 reduces before the vote: it lost 3-5% with the lazy reduction while
  // its m moved in 16% of tiles (session 45) and still 0.979-0.997x at d128 once it moved in 2.4% (session 46)
  constexpr bool LAZY_MAX = !E::FP8;
  if (MASKED) {
    // diagonal band / window edge / ragged end: key n is visible to query row when n < seqlen_k, n <= row + diag
    // (causal) and n >= row + diag - window_left (WINDOW)
#pragma unroll
    for (int r = 0; r < NREGS; ++r) {
      const int key = n0 + 8 * (r / 4) + 2 * t + r % 2;
      bool visible = key < seqlen_k && (!CAUSAL || key <= row0 + 8 * ((r / 2) % 2) + diag);
      if constexpr (WINDOW) visible = visible && key >= row0 + 8 * ((r / 2) % 2) + diag - window_left;
      s[r] = visible ? s[r] * scale[r / BLOCK_REGS] : -INFINITY;
    }
  }
  float mx[2], offset[SB][2];
  bool passes = false;
  // BITS (MAX_BY_BITS): the row max of an unmasked tile of one block as the integer max of its bit patterns
  constexpr bool BITS_MAX = BITS && !MASKED && SB == 1;
  bool inexact = false;  // BITS_MAX: some row's integer max may not be its max (below)
  // row i's tile max as floats, over the quad unless LAZY_MAX (MASKED or SB == 1)
  auto float_max = [&](int i) {
    const float x = reduce_row<NREGS / 4>(s, 0, i, fmax);
    return LAZY_MAX ? x : quad_reduce(x, fmax);
  };
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    // unmasked scores are raw: the max is scaled after the reduction (scales are positive), per block
    if constexpr (BITS_MAX) {
      int bits = row_max_bits<NREGS / 4>(s, i);
      if constexpr (!LAZY_MAX) bits = quad_reduce(bits, [](int a, int b) { return max(a, b); });
      mx[i] = __int_as_float(bits);
      inexact |= bits < 0 && !(st.m[i] >= 0.f);
    } else if constexpr (MASKED || SB == 1) {
      mx[i] = float_max(i);
    } else {
      mx[i] = fmaxf(reduce_row<BLOCK_GROUPS>(s, 0, i, fmax) * scale[0],
                    reduce_row<BLOCK_GROUPS>(s, BLOCK_GROUPS, i, fmax) * scale[1]);
      if constexpr (!LAZY_MAX) mx[i] = quad_reduce(mx[i], fmax);
    }
    if constexpr (!MASKED && SB == 1) mx[i] *= scale[0];  // max and fl(x·s), s > 0, commute: exact before a shuffle
    passes |= mx[i] > st.m[i] + E::MAX_SLACK;
  }
  const bool moved = __any_sync(0xffffffff, passes || inexact);
  // BITS_MAX: a row whose scores and running max are all negative (a first tile's, or a row of such tiles) takes its
  // max as floats; m then stays or moves as the vote would have had it, O's rescale by alpha = 1 aside
  if (BITS_MAX && moved && __any_sync(0xffffffff, inexact)) {
#pragma unroll
    for (int i = 0; i < 2; ++i) mx[i] = float_max(i) * scale[0];
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float m_old = st.m[i];
    if (LAZY_MAX && moved) mx[i] = quad_reduce(mx[i], fmax);
    if (moved) st.m[i] = fmaxf(m_old, mx[i]);
    const float m_use = (MASKED && st.m[i] == -INFINITY) ? 0.f : st.m[i];
#pragma unroll
    for (int h = 0; h < SB; ++h) offset[h][i] = p_offset[h] - m_use;
    if constexpr (LATE)
      alpha[i] = m_old - m_use;
    else
      alpha[i] = moved ? ex2(m_old - m_use) : 1.f;
  }
#pragma unroll
  for (int r = 0; r < NREGS; ++r) {
    const int h = r / BLOCK_REGS, i = (r / 2) % 2;
    s[r] = ex2(MASKED ? s[r] + offset[h][i] : fmaf(s[r], scale[h], offset[h][i]));
  }
  // row i's sum of this tile's p, each block's times its l_unit
  auto tile_row_sum = [&](int i) {
    if constexpr (SB == 1)
      return reduce_row<BLOCK_GROUPS>(s, 0, i, add) * l_unit[0];
    else
      return fmaf(reduce_row<BLOCK_GROUPS>(s, BLOCK_GROUPS, i, add), l_unit[1],
                  reduce_row<BLOCK_GROUPS>(s, 0, i, add) * l_unit[0]);
  };
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    // as one expression: written in two steps, ptxas spills more in FP8 d256's causal overlapped loop
    if constexpr (LATE)
      tile_sum[i] = tile_row_sum(i);
    else
      st.l[i] = st.l[i] * alpha[i] + tile_row_sum(i);
  }
  return moved;
}

// P (fp32, accumulator layout) -> A fragments of the P·V wgmma, four registers per k-step (32 keys in FP8, 16 in
// 16-bit), each packed from this thread's own accumulator registers.
// 16-bit: the A fragment of k-step kk wants (row g, keys 16kk + 2t, +1), (row g+8, same), (row g, keys 16kk + 8 +
// 2t, +1), (row g+8, same): exactly the accumulator's registers 8kk .. 8kk+7 in pairs.
// FP8: the A fragment's k-positions 4t..4t+3 and 16+4t..16+4t+3 of a 32-key step receive the keys this thread
// holds, {2t, 2t+1, 8+2t, 9+2t} and {16+2t, 17+2t, 24+2t, 25+2t}: the bundle stores V's keys in that order within
// each 32-key group (fa3fp8.fp8_layout.v_key_positions), so no key crosses lanes.
template <class E, int NREGS, int PREGS>
__device__ __forceinline__ void pack_p(const float (&p)[NREGS], uint32_t (&a)[PREGS]) {
  if constexpr (!E::FP8) {
#pragma unroll
    for (int r = 0; r < PREGS; ++r) a[r] = pack_half2<typename E::Out>(p[2 * r], p[2 * r + 1]);
  } else {
#pragma unroll
    for (int kk = 0; kk < NREGS / 16; ++kk)
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = (4 * kk + 2 * half) * 4 + i * 2;  // 8-key groups 4kk + 2half and the next, row g + 8i
          a[kk * 4 + half * 2 + i] = pack_e4m3x2(p[r], p[r + 1]) | (pack_e4m3x2(p[r + 4], p[r + 5]) << 16);
        }
  }
}

// S (64 x N) = Q (64 x D) · K tile (N x D)ᵀ, 32 bytes of D per wgmma, Q and K in panels of QK_PANEL bytes a row;
// FRESH: as desc_at
template <class E, int D, int BM, int N, bool FRESH>
__device__ __forceinline__ void issue_qk(float (&s)[N / 2], const uint8_t* q_wg, const uint8_t* k_tile) {
  constexpr int ROW = QK_PANEL<E, D>, STEPS = ROW / 32;  // wgmma k-steps per panel
  static_assert(!FRESH || ROW == PANEL, "descriptors made anew take 128-byte panels");
  const uint64_t q0 = smem_desc(q_wg, 16, ROW), k0 = smem_desc(k_tile, 16, ROW);
#pragma unroll
  for (int kk = 0; kk < D * E::BYTES / 32; ++kk) {
    const int panel = kk / STEPS, col = (kk % STEPS) * 32;
    const uint64_t desc_q = desc_at<FRESH>(q_wg, q0, panel * BM * ROW + col);
    const uint64_t desc_k = desc_at<FRESH>(k_tile, k0, panel * N * ROW + col);
    if (kk == 0)
      WgmmaQK<E, N>::first(s, desc_q, desc_k);
    else
      WgmmaQK<E, N>::add(s, desc_q, desc_k);
  }
}

// O (64 x D as D / O_COLS accumulators of 64 x O_COLS) += P (64 x N keys) · V tile. FP8: the tile is V transposed,
// one panel (D rows x 128 keys) per 128 keys; k-steps of 32 keys are 32 bytes apart inside a panel. 16-bit: the tile
// is V as stored (N keys x D, D/64 panels); k-steps of 16 keys are 16 rows (2048 B) apart, and the next 64 columns
// of D are one panel further. FRESH: as desc_at.
template <class E, int D, int N, bool FRESH, int PREGS>
__device__ __forceinline__ void issue_pv(float (&o)[D / O_COLS<D>][O_COLS<D> / 2], const uint32_t (&a)[PREGS],
                                         const uint8_t* v_tile) {
  constexpr uint32_t LEADING = E::FP8 ? 16 : N * PANEL;
  constexpr int PANELS = O_COLS<D> * E::BYTES / PANEL;  // 16-bit: panels of V per accumulator
  const uint64_t v0 = smem_desc(v_tile, LEADING);
#pragma unroll
  for (int nb = 0; nb < D / O_COLS<D>; ++nb) {
#pragma unroll
    for (int kk = 0; kk < PREGS / 4; ++kk) {
      uint64_t desc;
      if constexpr (E::FP8)
        desc = desc_at<FRESH>(v_tile, v0, (kk / 4) * D * PANEL + nb * O_COLS<D> * PANEL + (kk % 4) * 32);
      else
        desc = desc_at<FRESH>(v_tile, v0, nb * PANELS * N * PANEL + kk * 16 * PANEL, LEADING);
      WgmmaPV<E, O_COLS<D>>::add(o[nb], &a[kk * 4], desc);
    }
  }
}

template <int D>
__device__ __forceinline__ void scale_o(float (&o)[D / O_COLS<D>][O_COLS<D> / 2], const float (&f)[2]) {
#pragma unroll
  for (int nb = 0; nb < D / O_COLS<D>; ++nb)
#pragma unroll
    for (int r = 0; r < O_COLS<D> / 2; ++r) o[nb][r] *= f[(r / 2) % 2];
}

// ------------------------------------------------------------------------------------------ the kernel

// Causal: the keys of work tile t that row `row` sees (its key0 on), those before key `row + diag + 1`
__host__ __device__ __forceinline__ int causal_keys(const WorkTile& t, int row) {
  return max(min(t.seqlen_k, row + 1 + t.diag), 0);
}

// WINDOW: of rows [r0, r0 + rows) of work tile t (keys counted from its key0), the first key tile any of them sees
// (first) and the key from which on no key tile holds a key left of some row's window (lo, a tile boundary): the
// tiles between are the window's masked left edge
template <int BLOCK_N>
__host__ __device__ __forceinline__ void window_edge(const WorkTile& t, int r0, int rows, int window_left, int& first,
                                                     int& lo) {
  const int left = r0 + t.diag - window_left;  // row r0's first key
  first = max(left, 0) / BLOCK_N;
  lo = (max(left + rows - 1, 0) + BLOCK_N - 1) / BLOCK_N * BLOCK_N;
}

// FOLD: a sequence's row blocks end where it ends, so that the rows of its row blocks past its queries (three
// consumers' 192-row blocks pass 4096 queries by 128) lie before its first query, in a block that sees a key tile or
// two, rather than past its last, in a block that sees them all and whose CTA then runs one consumer for most of a
// fold. fold_lead: those rows, in the first of its m_blocks row blocks of block_m rows (more than block_m where the
// first block has none); a whole number of warpgroups, so that a warpgroup's rows lie in one FP8 quantization block
// of Q. Counted from the launch's even m_blocks, which also evens out the folds of an odd number of row blocks. H100,
// session 57, kernel_ab against blocks from the first query: FP8 d128 three consumers' folds S2K +17%, S4K +4%, S8K
// +3%, S16K level; d64's S2K +17-18%, S8K +4%; ragged FP8 d128 (two consumers' folds) +4%.
__host__ __device__ __forceinline__ int fold_lead(int block_m, int m_blocks, int seqlen_q) {
  return m_blocks * block_m - (seqlen_q + WG_ROWS - 1) / WG_ROWS * WG_ROWS;
}

// Whether row `row` of a work tile (counted from its sequence's first query) is one of the sequence's seqlen_q rows:
// FOLD, the first row block's rows before the first query are not (fold_lead)
template <bool FOLD>
__host__ __device__ __forceinline__ bool in_sequence(int row, int seqlen_q) {
  return FOLD ? static_cast<unsigned>(row) < static_cast<unsigned>(seqlen_q) : row < seqlen_q;
}

// Work tile w, numbered head by head with the row blocks inside (causal: longest first), so that the CTAs running at
// once read the same heads' K and V from L2; false when its rows lie past its sequence's end (varlen). A cluster of
// two CTAs takes row blocks 2i and 2i+1 of one sequence and head, which read the same K/V tiles: both run when the
// first has rows (the second's rows past the end are computed and not stored); causal, both read the key tiles of
// the later block 2i+1, which block 2i's mask hides where they pass its rows. FOLD (causal, persistent CTAs):
// ranks 2f and 2f+1 are row blocks m-1-f and f, a long one and a short one whose key tiles add up to the same count
// for every f, so that CTAs dealt whole folds round-robin get equal work; a sequence's blocks end where it does
// (fold_lead), and a block before its first query has no rows. WINDOW (causal, unsplit): the
// key tiles before the first one that the block's first row sees are skipped (key0); each consumer warpgroup skips
// and masks its own left edge (window_edge).
template <int BLOCK_M, int BLOCK_N, bool CAUSAL, int CLUSTER, bool FOLD, bool WINDOW = false>
__host__ __device__ __forceinline__ bool tile_at(const Params& p, int w, WorkTile& t) {
  const int bh = w / p.m_blocks, rank = w % p.m_blocks;
  const int m_blk = !CAUSAL ? rank
                    : FOLD  ? (rank % 2 == 0 ? p.m_blocks - 1 - rank / 2 : rank / 2)
                            : p.m_blocks - 1 - rank;
  t.b = bh / p.heads;
  t.h = bh % p.heads;
  t.hk = t.h / (p.heads / p.kv_heads);
  t.q_start = p.cu_q[t.b];
  t.seqlen_q = p.cu_q[t.b + 1] - t.q_start;
  const int lead = FOLD ? fold_lead(BLOCK_M, p.m_blocks, t.seqlen_q) : 0;
  t.m0 = m_blk * BLOCK_M - lead;
  if (t.m0 - (CLUSTER == 2 ? m_blk % 2 * BLOCK_M : 0) >= t.seqlen_q || (FOLD && t.m0 + BLOCK_M <= 0))
    return false;
  t.k_start = p.cu_k[t.b];
  t.seqlen_k = p.cu_k[t.b + 1] - t.k_start;
  t.diag = t.seqlen_k - t.seqlen_q;  // bottom-right causal alignment
  const int last_row = (CLUSTER == 2 ? m_blk | 1 : m_blk) * BLOCK_M + BLOCK_M - lead;  // past the tile's (pair's) rows
  const int hi = CAUSAL ? causal_keys(t, last_row - 1) : t.seqlen_k;
  t.n_full = (CAUSAL ? causal_keys(t, t.m0) : t.seqlen_k) / BLOCK_N * BLOCK_N;
  t.n_tiles = (hi + BLOCK_N - 1) / BLOCK_N;
  t.key0 = 0;
  t.split = -1;
  if constexpr (WINDOW) {
    int first, lo;
    window_edge<BLOCK_N>(t, t.m0, BLOCK_M, p.window_left, first, lo);
    const int key0 = first * BLOCK_N;
    t.key0 = key0;
    t.k_start += key0, t.seqlen_k -= key0, t.diag -= key0, t.n_full -= key0;
    t.n_tiles = (hi - key0 + BLOCK_N - 1) / BLOCK_N;
  }
  return true;
}

// The tail split's iterations (the split units' key tiles, unit after unit) are dealt in even, contiguous shares
// to the split.grid / CLUSTER CTAs (pairs). A share is at most one unit long (fewer split units than shares), so it
// touches one unit or two: its segments 0 and 1. Segment seg of share c is key tiles [begin, end) of split unit
// `unit`; false when the share has no such segment.
// 32-bit arithmetic: plan_split keeps grid x units x key_tiles below 2^31.
template <int CLUSTER>
__host__ __device__ __forceinline__ bool tail_segment(const TailSplit& split, int c, int seg, int& unit, int& begin,
                                                      int& end) {
  const int n = split.key_tiles, total = split.units * n, shares = split.grid / CLUSTER;
  const int lo = c * total / shares, hi = (c + 1) * total / shares, u = lo / n + seg;
  const int b = lo > u * n ? lo : u * n, e = hi < (u + 1) * n ? hi : (u + 1) * n;
  unit = u, begin = b - u * n, end = e - u * n;
  return b < e;
}

// Folds: a split unit is a fold, its iterations its long work tile's key tiles (rank 2f), then its short one's (2f+1).
// Segment s of share c is piece s % 2 (0: the long work tile, 1: the short) of the (s / 2)-th unit the share touches;
// a CTA dealt folds visits it as tail item 2 (c + s / 2 x grid) + s % 2 (next_work).
__host__ __device__ __forceinline__ int fold_item(const TailSplit& split, int c, int s) {
  return 2 * (c + s / 2 * split.grid) + s % 2;
}

// The fold `unit` and its iterations [b, e) that tail item x takes (fold_item's inverse); false when its share
// touches no (x / 2 / grid)-th unit
__host__ __device__ __forceinline__ bool fold_segment(const TailSplit& split, int x, int& unit, int& b, int& e) {
  return tail_segment<1>(split, x / 2 % split.grid, x / 2 / split.grid, unit, b, e);
}

// Key tiles [begin, end) of a fold's work tile `piece` (n key tiles; the long one's n_long come first) that the
// fold's iterations [b, e) take; false when none.
__host__ __device__ __forceinline__ bool fold_piece(int b, int e, int piece, int n_long, int n, int& begin,
                                                    int& end) {
  const int first = piece == 0 ? 0 : n_long;
  begin = b > first ? b - first : 0;
  end = e - first < n ? e - first : n;
  return begin < end;
}

// The tail item of share c's segment on piece `piece` of fold `unit` (n_long: its long work tile's key tiles, n: the
// piece's), or -1 when the share has none there
__host__ __device__ __forceinline__ int fold_slot(const TailSplit& split, int c, int unit, int piece, int n_long,
                                                  int n) {
  for (int half = 0; half < 2; ++half) {
    int u, b, e, begin, end;
    if (tail_segment<1>(split, c, half, u, b, e) && u == unit && fold_piece(b, e, piece, n_long, n, begin, end))
      return fold_item(split, c, 2 * half + piece);
  }
  return -1;
}

// A causal split's item x (counted from split.from): part `part` (of split.parts) of the work tile returned, rank
// x % CLUSTER of its unit, so that the parts of a unit are adjacent items and the CTAs on heads that share K/V read
// the same keys at once; causal_slot is its inverse, the item of part `part` of the work tile of rank `rank` in unit
// `unit` (work tile split.from + unit x CLUSTER + rank)
template <int CLUSTER>
__host__ __device__ __forceinline__ int causal_item(const TailSplit& split, int x, int& part) {
  part = x / CLUSTER % split.parts;
  const int unit = x / CLUSTER / split.parts;
  return split.from + unit * CLUSTER + x % CLUSTER;
}
template <int CLUSTER>
__host__ __device__ __forceinline__ int causal_slot(const TailSplit& split, int unit, int rank, int part) {
  return (unit * split.parts + part) * CLUSTER + rank;
}

// Key tiles [begin, end) of part `part` of a work tile's n_tiles, split.parts equal parts
__host__ __device__ __forceinline__ void causal_part(const TailSplit& split, int part, int n_tiles, int& begin,
                                                     int& end) {
  begin = part * n_tiles / split.parts, end = (part + 1) * n_tiles / split.parts;
}

// Bytes of a CTA's O rows (16-bit output) where its shared memory has room for them beside Q and the ring, else 0
// (16-bit d128 on 176-key tiles, d256 on 80-key ones, FP8 d128 on 256-key ones fill it). Those kernels stage O: each
// consumer warpgroup writes its rows there and one TMA store per 128-byte panel takes them out, instead of D / 4
// four-byte stores per row.
template <class E, int D, int BLOCK_N, int STAGES, int CONSUMERS>
__host__ __device__ constexpr int staged_o_bytes() {
  constexpr int bytes = CONSUMERS * WG_ROWS * D * 2;
  return sizeof(StorageFor<E, D, BLOCK_N, STAGES, CONSUMERS>) + bytes + 1024 <= 227 * 1024 ? bytes : 0;
}

// Kernels that stage O in the V ring's slots where they have no room for a buffer of it: the overlapped loop on two
// stages, where O's rows fit in the two slots. Once every consumer's last P·V is done, the consumers write O there,
// and the producer loads the next work tile's first V tile when the TMA stores of O have read it (o_free); the next
// work tile reads that tile only after its first Q·Kᵀ and softmax (BF16 d256, H100: +1-6% against O stored from
// registers, session 43).
template <class E, int D, int BLOCK_N, int STAGES, int CONSUMERS, int LOOP>
__host__ __device__ constexpr bool o_in_v() {
  return staged_o_bytes<E, D, BLOCK_N, STAGES, CONSUMERS>() == 0 && LOOP == OVERLAP &&
         STAGES == 2 && CONSUMERS * WG_ROWS * D * 2 <= STAGES * BLOCK_N * D * E::BYTES;
}

// Kernels that may split their work along the keys (TailSplit): all but BF16/FP16 at d256, whose kernel without a
// causal mask ran 11-13% slower with the split's code in it (H200, session 12; 3-7% in session 20): ptxas then
// schedules its loop differently, with ~50 more register moves per tile. The launcher asks fa3fp8_splits_tail before
// it allocates the split's workspace.
template <class E, int D>
__host__ __device__ constexpr bool splits_tail() {
  return D == 64 || D == 128 || (E::FP8 && D == 256);
}

// Work item w of this CTA's loop: work tile w before split.from; after it, segment x = w - split.from = seg x grid +
// cta of the CTA's share (tail_segment), on the rows of its unit's work tile for the CTA's rank in the pair (folds:
// fold_item's segment of the share; causal launches of one CTA per work tile: causal_item's part of a work tile).
// False when the item has no rows (varlen) or the share no segment `seg` (folds: no keys of that piece).
template <int BLOCK_M, int BLOCK_N, bool CAUSAL, int CLUSTER, bool FOLD, bool SPLIT, bool WINDOW = false>
__device__ __forceinline__ bool work_tile(const Params& p, const TailSplit& split, int w, WorkTile& t) {
  if (!SPLIT || w < split.from) return tile_at<BLOCK_M, BLOCK_N, CAUSAL, CLUSTER, FOLD, WINDOW>(p, w, t);
  const int x = w - split.from;
  int unit, begin, end;
  if constexpr (FOLD) {
    const int piece = x % 2;
    if (!fold_segment(split, x, unit, begin, end)) return false;
    const int fold = split.from + 2 * unit;
    const bool rows = tile_at<BLOCK_M, BLOCK_N, CAUSAL, CLUSTER, FOLD>(p, fold, t);
    const int n_long = rows ? t.n_tiles : 0;
    if ((piece == 0 ? !rows : !tile_at<BLOCK_M, BLOCK_N, CAUSAL, CLUSTER, FOLD>(p, fold + 1, t)) ||
        !fold_piece(begin, end, piece, n_long, t.n_tiles, begin, end))
      return false;
  } else if constexpr (CAUSAL) {
    int part;
    if (!tile_at<BLOCK_M, BLOCK_N, CAUSAL, CLUSTER, FOLD>(p, causal_item<CLUSTER>(split, x, part), t)) return false;
    causal_part(split, part, t.n_tiles, begin, end);
  } else {
    const int cta = x % split.grid;
    if (!tail_segment<CLUSTER>(split, cta / CLUSTER, x / split.grid, unit, begin, end) ||
        !tile_at<BLOCK_M, BLOCK_N, CAUSAL, CLUSTER, FOLD>(p, split.from + unit * CLUSTER + cta % CLUSTER, t))
      return false;
    begin = min(begin, t.n_tiles), end = min(end, t.n_tiles);  // a sequence shorter than the longest has fewer tiles
  }
  t.key0 = begin * BLOCK_N;
  t.k_start += t.key0, t.seqlen_k -= t.key0, t.diag -= t.key0, t.n_full -= t.key0;
  t.n_tiles = end - begin;
  t.split = x;
  return true;
}

// This CTA's work tiles in order: blockIdx.x, + gridDim.x, ...; FOLD: both work tiles of folds blockIdx.x,
// + gridDim.x, ... (work tiles 2f and 2f+1)
template <bool FOLD>
__device__ __forceinline__ int first_work() {
  return FOLD ? 2 * blockIdx.x : blockIdx.x;
}
template <bool SPLIT>
__device__ __forceinline__ int work_end(const Params& p, const TailSplit& split) {
  return SPLIT ? split.items : p.work_tiles;
}
template <bool FOLD>
__device__ __forceinline__ int next_work(int w) {
  return !FOLD ? w + gridDim.x : w % 2 == 0 ? w + 1 : w - 1 + 2 * gridDim.x;
}

// Pairs of CTAs release Q after their last P·V, single CTAs after their last Q·Kᵀ: pairs releasing it early lost 0-2.6%
// (H200, session 25; H100, session 54: BF16 d128 0.974-0.990x, FP8 d256 0.983-0.990x)
template <int CLUSTER>
constexpr bool EARLY_Q = CLUSTER == 1;

// SHARED_TILES: the producer puts work item `item`'s work tile t (w its index, -1: no more work items) into the
// item's slot and arrives on the slot's barrier; a consumer waits there, takes t and returns w
template <class Storage>
__device__ __forceinline__ void publish_tile(Storage& sm, int item, int w, const WorkTile& t) {
  sm.tile[item % 2] = t;
  sm.tile_w[item % 2] = w;
  mbar_arrive(&sm.tile_full[item % 2]);
}
template <class Storage>
__device__ __forceinline__ int take_tile(Storage& sm, int item, WorkTile& t) {
  mbar_wait(&sm.tile_full[item % 2], (item / 2) & 1);
  t = sm.tile[item % 2];
  return sm.tile_w[item % 2];
}

// BLOCK_N keys per K/V tile (FP8: whole quantization blocks of the bundle), STAGES tiles of K and of V in the ring.
// CLUSTER 2: two CTAs of a cluster run adjacent row blocks in step (causal: over the later one's key tiles), and each
// loads half of every K/V tile into both (TMA multicast), so K and V cross from L2 once per pair; a slot is free
// again when the consumers of both CTAs have released it.
// Persistent: each CTA takes work tiles blockIdx.x, blockIdx.x + gridDim.x, ... (FOLD: folds, see next_work); the ring
// and Q's barriers run on across them, so the producer loads the next work tile's Q and first K/V tiles while the
// consumers finish the last P·V and the epilogue of the current one.
// WINDOW: causal attention in a sliding window of p.window_left + 1 keys (tile_at), unsplit, one CTA per work tile.
template <class E, int D, int BLOCK_N, int STAGES, int CONSUMERS, bool CAUSAL, int LOOP, typename OutT, int CLUSTER,
          bool FOLD, bool WINDOW = false>
__global__ void __launch_bounds__(128 * (CONSUMERS + 1), 1)
    attn_fwd(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
             const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_o, const Params p,
             const __grid_constant__ TailSplit split) {
  extern __shared__ uint8_t smem_raw[];
  constexpr int BLOCK_M = CONSUMERS * WG_ROWS;
  constexpr int ROW_BYTES = D * E::BYTES;            // one row of Q, K or V
  constexpr int QK_ROW = QK_PANEL<E, D>;             // bytes of a swizzled row of Q or K (16-bit: of V too)
  constexpr int TILE_BYTES = BLOCK_N * ROW_BYTES;    // one K or V tile
  constexpr int S_REGS = BLOCK_N / 2;                // score accumulator per thread
  constexpr int P_REGS = BLOCK_N * E::BYTES / 8;     // P as A fragments per thread
  constexpr int SB = E::FP8 ? BLOCK_N / KV_BLOCK : 1;  // scale blocks per tile
  constexpr bool SPLIT = splits_tail<E, D>() && !WINDOW;
  constexpr bool SHARED = SHARED_TILES<E, D, CAUSAL, WINDOW>;
  // wgmma descriptors made anew from their addresses (desc_at): BF16/FP16 d256 without a causal mask ran 4-6% slower
  // at S4K / 16K with one add per wgmma, which every other kernel runs level or faster with (H200, session 18)
  constexpr bool FRESH_DESC = !E::FP8 && D == 256 && !CAUSAL;
  constexpr bool O_STAGE = staged_o_bytes<E, D, BLOCK_N, STAGES, CONSUMERS>() > 0;
  constexpr bool O_IN_V = o_in_v<E, D, BLOCK_N, STAGES, CONSUMERS, LOOP>();
  // warpgroups whose rows all lie past the sequence's end skip their products (below); at d64 only in FP8 folds
  // (+2.7%): ptxas scheduled d64's other loops worse with the skip in them, and spilled in the BF16 causal ones (H100,
  // session 38, kernel_ab: BF16 causal S16K -2.2%, FP8 full S4K -1.3%), while d128 and d256 gained up to 4%
  constexpr bool SKIP_IDLE = D != 64 || (E::FP8 && FOLD);
  // causal, where the row block is no whole number of key tiles (three consumers' 192 rows, BF16/FP16 d256's 80-key
  // tiles): each consumer takes the mask's bounds from its own 64 rows, runs the unmasked softmax on the key tiles its
  // first row sees whole and leaves out the tiles past its last row's diagonal. H100, session 51, kernel_ab (three
  // runs, 5 to 9 rounds): BF16 d256 causal S2K-16K +0.4-3.8%, BF16 d128 three consumers S16K +0.4-1.3%, FP8 d128
  // three consumers' folds S8K / 16K +1.0% / level to +2.3%. The 128-row, 128-key kernels, whose bounds are the
  // block's, lost 1-2% to the code (FP8 d256, BF16 d128 folds), and d64's three consumers spilled 12 bytes: both go
  // without.
  constexpr bool WG_BOUNDS = CAUSAL && D >= 128 && BLOCK_M % BLOCK_N != 0;
  constexpr int O_ROW_BYTES = D * 2;  // one row of the 16-bit output
  static_assert(!E::FP8 || BLOCK_N % KV_BLOCK == 0, "FP8 tiles are whole quantization blocks");
  static_assert(CLUSTER == 1 || (CLUSTER == 2 && !FOLD && BLOCK_N % 16 == 0),
                "pairs of CTAs: one work tile each, half tiles of whole 8-row swizzle groups");
  static_assert(!FOLD || (CAUSAL && CLUSTER == 1), "folds pair causal row blocks of one CTA");
  static_assert(!WINDOW || (CAUSAL && CLUSTER == 1 && !FOLD), "windows: causal, no pairs of CTAs, no folds");
  constexpr int HALF_ROWS = BLOCK_N / CLUSTER;  // rows of each K/V tile that one CTA of the cluster loads
  constexpr int HALF_D = D / CLUSTER;           // FP8: rows of each transposed V panel that one CTA loads
  // registers per consumer thread after the producer gives its own back: 64K minus 24 per producer thread
  constexpr int CONSUMER_REGS = CONSUMERS == 2 ? 240 : 160;
  using Storage = StorageFor<E, D, BLOCK_N, STAGES, CONSUMERS>;
  Storage& sm = *reinterpret_cast<Storage*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* const o_buf = reinterpret_cast<uint8_t*>(&sm) + sizeof(Storage);  // O_STAGE: BLOCK_M rows of O

  if (threadIdx.x == 0) {
    mbar_init(&sm.q_full, 1);
    mbar_init(&sm.q_empty, 4 * CONSUMERS);  // one arrival per consumer warp
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&sm.k_full[s], 1);
      mbar_init(&sm.v_full[s], 1);
      mbar_init(&sm.k_empty[s], 4 * CONSUMERS * CLUSTER);  // every consumer warp of the cluster
      mbar_init(&sm.v_empty[s], 4 * CONSUMERS * CLUSTER);
    }
    if constexpr (O_IN_V) mbar_init(&sm.o_free, CONSUMERS * CLUSTER);  // every consumer warpgroup of the cluster
    if constexpr (SHARED)
      for (int i = 0; i < 2; ++i) mbar_init(&sm.tile_full[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if constexpr (CLUSTER == 2) cluster_sync();  // the peer's barriers exist before anything lands in them
  const uint32_t rank = CLUSTER == 2 ? cluster_rank() : 0;

  // the warpgroup through a shuffle from lane 0: ptxas then knows it is warp-uniform, and builds the Q·Kᵀ wgmma
  // descriptors (Q's rows are the warpgroup's) in uniform registers rather than moving them there per wgmma
  const int wg = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
  if (wg == 0) {
    // producer: one thread issues every TMA copy; the warpgroup gives its registers to the consumers
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    if (threadIdx.x != 0) return;
    if constexpr (TIMELINE) record_edge(p, true, 0, false);
    int tiles = 0, items = 0;  // K/V tiles and work tiles loaded so far: the ring's and Q's phases
    int keyed = 0;             // O_IN_V: work tiles with keys so far, o_free's phase
    for (int w = first_work<FOLD>(); w < work_end<SPLIT>(p, split); w = next_work<FOLD>(w)) {
      WorkTile t;
      if (!work_tile<BLOCK_M, BLOCK_N, CAUSAL, CLUSTER, FOLD, SPLIT, WINDOW>(p, split, w, t)) continue;
      if constexpr (TIMELINE) record_event(p, true, 0, items, EV_TOP);
      if constexpr (SHARED) publish_tile(sm, items, w, t);
      if (items > 0) mbar_wait(&sm.q_empty, (items - 1) & 1);
      mbar_expect_tx(&sm.q_full, BLOCK_M * ROW_BYTES);
      for (int pn = 0; pn < ROW_BYTES / QK_ROW; ++pn)
        tma_load(sm.q + pn * BLOCK_M * QK_ROW, &map_q, t.h * ROW_BYTES + pn * QK_ROW, t.q_start + t.m0, &sm.q_full);
      if constexpr (TIMELINE) record_event(p, true, 0, items, EV_Q);
      // FP8: this sequence's first and last block's columns of V transposed. A tile's block past the last loads the
      // last again: its keys are masked (P is 0), and the bundle's columns past its last block are not initialized.
      const int vcol = E::FP8 ? p.cu_bk[t.b] * KV_BLOCK + t.key0 : 0;
      const int vcol_last = E::FP8 ? (p.cu_bk[t.b + 1] - 1) * KV_BLOCK : 0;
      // one copy of this CTA's part of a K/V tile: with CLUSTER 2 into both CTAs of the pair
      auto copy = [&](uint8_t* dst, const CUtensorMap* map, int col, int row, uint64_t* full) {
        if constexpr (CLUSTER == 2)
          tma_load_multicast(dst, map, col, row, full, 0b11);
        else
          tma_load(dst, map, col, row, full);
      };
      // this CTA's rows of K/V tile j (keys x D) into `tile`: all of them, or with CLUSTER 2 its half
      auto load_rows = [&](uint8_t* tile, const CUtensorMap* map, uint64_t* full, int j) {
        for (int pn = 0; pn < ROW_BYTES / QK_ROW; ++pn)
          copy(tile + pn * BLOCK_N * QK_ROW + rank * HALF_ROWS * QK_ROW, map, t.hk * ROW_BYTES + pn * QK_ROW,
               t.k_start + j * BLOCK_N + rank * HALF_ROWS, full);
      };
      for (int j = 0; j < t.n_tiles; ++j) {
        const int g = tiles + j, s = g % STAGES;
        const uint32_t free_phase = ((g / STAGES) & 1) ^ 1;  // the phase in which the ring's g-th tile finds s free
        if (g >= STAGES) mbar_wait(&sm.k_empty[s], free_phase);
        mbar_expect_tx(&sm.k_full[s], TILE_BYTES);  // CLUSTER 2: both halves land in each CTA
        load_rows(sm.k[s], &map_k, &sm.k_full[s], j);
        if (g >= STAGES) mbar_wait(&sm.v_empty[s], free_phase);
        // O_IN_V: the previous work tile's O has left the V slots (the tiles after this one wait behind it)
        if (O_IN_V && j == 0 && keyed > 0) mbar_wait(&sm.o_free, (keyed - 1) & 1);
        mbar_expect_tx(&sm.v_full[s], TILE_BYTES);
        if constexpr (E::FP8) {
          for (int pn = 0; pn < SB; ++pn)  // one [D rows x 128 keys] panel per block, or with CLUSTER 2 its half
            copy(sm.v[s] + pn * D * PANEL + rank * HALF_D * PANEL, &map_v,
                 min(vcol + (j * SB + pn) * KV_BLOCK, vcol_last), t.hk * D + rank * HALF_D, &sm.v_full[s]);
        } else {
          load_rows(sm.v[s], &map_v, &sm.v_full[s], j);
        }
        if constexpr (TIMELINE)
          if (j == 0) record_event(p, true, 0, items, EV_FIRST);
      }
      if constexpr (TIMELINE) record_event(p, true, 0, items, EV_LOOP);
      if constexpr (TIMELINE) record_info(p, true, 0, items, w, t.n_tiles, SPLIT && t.split >= 0);
      tiles += t.n_tiles;
      ++items;
      if constexpr (O_IN_V) keyed += t.n_tiles > 0;
    }
    if constexpr (SHARED) publish_tile(sm, items, -1, WorkTile{});
    if constexpr (CLUSTER == 2) {
      // stay until both CTAs' consumers have released the last tiles: they arrive on this CTA's barriers, and the
      // peer's multicast copies into this CTA are all consumed by then
      for (int g = max(tiles - STAGES, 0); g < tiles; ++g) {
        mbar_wait(&sm.k_empty[g % STAGES], (g / STAGES) & 1);
        mbar_wait(&sm.v_empty[g % STAGES], (g / STAGES) & 1);
      }
      if (O_IN_V && keyed > 0) mbar_wait(&sm.o_free, (keyed - 1) & 1);  // the peer's last arrivals here
    }
    if constexpr (TIMELINE) record_edge(p, true, 0, true);
    return;
  }

  // consumers
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGS));
  const int cw = wg - 1;
  const int tw = threadIdx.x % 128;
  const int lane = tw % 32;
  const uint8_t* q_wg = sm.q + cw * WG_ROWS * QK_ROW;
  if constexpr (TIMELINE) record_edge(p, tw == 0, wg, false);
  int tiles = 0, items = 0;
  // SHARED: the producer's w = -1 ends the loop (w's step is then unused; kept so the other kernels' loop stays as it
  // was compiled)
  for (int w = first_work<FOLD>(); SHARED || w < work_end<SPLIT>(p, split); w = next_work<FOLD>(w)) {
    WorkTile t;
    if constexpr (SHARED) {
      if ((w = take_tile(sm, items, t)) < 0) break;
    } else if (!work_tile<BLOCK_M, BLOCK_N, CAUSAL, CLUSTER, FOLD, SPLIT, WINDOW>(p, split, w, t)) {
      continue;
    }
    if constexpr (TIMELINE) record_event(p, tw == 0, wg, items, EV_TOP);
    const int row0 = t.m0 + cw * WG_ROWS + (tw / 32) * 16 + lane / 4;  // this thread's rows: row0 and row0 + 8
    const int wg_m0 = t.m0 + cw * WG_ROWS;
    const int n_tiles = t.n_tiles;
    // the key tiles [n_first, n_mine) this warpgroup computes, those before n_full without a mask (WINDOW: and from
    // n_lo on); the work tile's bounds are its first row's (t.n_full) and its last warpgroup's (n_tiles)
    int n_full = t.n_full, n_mine = n_tiles, n_first = 0, n_lo = 0;
    if constexpr (WG_BOUNDS) {
      n_full = causal_keys(t, wg_m0) / BLOCK_N * BLOCK_N;
      n_mine = min(n_tiles, (causal_keys(t, wg_m0 + WG_ROWS - 1) + BLOCK_N - 1) / BLOCK_N);
    }
    if constexpr (WINDOW) {
      window_edge<BLOCK_N>(t, wg_m0, WG_ROWS, p.window_left, n_first, n_lo);
      n_first = min(n_first, n_mine);
    }
    // O_IN_V: this work tile's O goes out through the V ring's slots (a split segment's goes to the workspace from
    // registers, and so does a keyless one's: the o_free protocol counts work tiles with keys, which keep a pair of
    // CTAs within one of each other; keyless ones do not). Asked after the loop, so that it holds no register there.
    auto o_via_v = [&]() { return O_IN_V && n_tiles > 0 && (!SPLIT || t.split < 0); };
    // O_IN_V: this warpgroup is done with the V slots (its stores have read them): one arrival of the pair's
    // CONSUMERS x CLUSTER that let the producers load the next work tile's V tiles there
    auto free_o = [&]() {
      if (O_IN_V && n_tiles > 0 && tw == 0) {
        mbar_arrive(&sm.o_free);
        if constexpr (CLUSTER == 2) mbar_arrive_cluster(&sm.o_free, rank ^ 1);
      }
    };
    // ring slot and phase of this work tile's K/V tile j
    auto slot = [&](int j) { return (tiles + j) % STAGES; };
    auto phase = [&](int j) { return static_cast<uint32_t>(((tiles + j) / STAGES) & 1); };
    auto release = [&](uint64_t* empty, int j) {
      if (lane == 0) {
        mbar_arrive(&empty[slot(j)]);
        if constexpr (CLUSTER == 2) mbar_arrive_cluster(&empty[slot(j)], rank ^ 1);
      }
    };
    // Q's last reader is this work tile's last Q·Kᵀ: once that is done, the producer may load the next work tile's Q
    // and first K/V tiles under the last softmax, P·V and epilogue. H200, session 11, against releasing Q after the
    // epilogue: +1-2% for the folds at S4K, BF16 d256 +0.1-1.7%, the rest level; pairs of CTAs release it after their
    // last P·V (BF16 d128 paired lost 1.5-2% at S8K and S16K in two runs with it, not understood; EARLY_Q)
    auto release_q_after = [&](int j) {
      if (EARLY_Q<CLUSTER> && j == n_tiles - 1 && lane == 0) mbar_arrive(&sm.q_empty);
    };
    // key tile j passed on unread: released once it has landed, so that the ring's arrivals keep their phases
    auto pass_tile = [&](int j) {
      mbar_wait(&sm.k_full[slot(j)], phase(j));
      release(sm.k_empty, j);
      release_q_after(j);
      mbar_wait(&sm.v_full[slot(j)], phase(j));
      release(sm.v_empty, j);
    };
    if (SKIP_IDLE && !in_sequence<FOLD>(wg_m0, t.seqlen_q)) {
      // every row of this warpgroup lies past the sequence's end (a last row block's later warpgroups; FOLD: before
      // its start, a first row block's earlier ones): no products and no epilogue, every tile passed on unread; the
      // warpgroups with rows then have the tensor cores to themselves. It leaves before O is set up: inside the
      // loop's branches, ptxas zeroed O twice and rescheduled the 16-bit loops (BF16 d256 causal folds -5.6% at S4K,
      // H100, session 37)
      mbar_wait(&sm.q_full, items & 1);
      if constexpr (TIMELINE) record_event(p, tw == 0, wg, items, EV_Q);
      for (int j = 0; j < n_tiles; ++j) pass_tile(j);
      if ((!EARLY_Q<CLUSTER> || n_tiles == 0) && lane == 0) mbar_arrive(&sm.q_empty);
      if (o_via_v()) consumers_sync<CONSUMERS>();  // as the warpgroups with rows do before they write O there
      free_o();
      if constexpr (TIMELINE) record_event(p, tw == 0, wg, items, EV_END);
      if constexpr (TIMELINE) record_info(p, tw == 0, wg, items, w, 0, SPLIT && t.split >= 0);
      tiles += n_tiles;
      ++items;
      continue;
    }
    float qk_scale = p.qk_scale_log2;
    const float* k_scale = nullptr;  // FP8: this sequence's per-block K and V scales, kv_blocks of them
    const float* v_scale = nullptr;
    int kv_blocks = 0;
    if constexpr (E::FP8) {
      if (in_sequence<FOLD>(wg_m0, t.seqlen_q))
        qk_scale *= p.q_scale[t.h * p.n_blocks_q + p.cu_bq[t.b] + wg_m0 / p.q_block];
      const int kblk = t.hk * p.n_blocks_k + p.cu_bk[t.b] + t.key0 / KV_BLOCK;
      k_scale = p.k_scale + kblk;
      v_scale = p.v_scale + kblk;
      kv_blocks = p.cu_bk[t.b + 1] - p.cu_bk[t.b] - t.key0 / KV_BLOCK;
    }

    float o[D / O_COLS<D>][O_COLS<D> / 2];
#pragma unroll
    for (int nb = 0; nb < D / O_COLS<D>; ++nb)
#pragma unroll
      for (int r = 0; r < O_COLS<D> / 2; ++r) o[nb][r] = 0.f;
    RowState st = {{-INFINITY, -INFINITY}, {0.f, 0.f}};
    float s_acc[S_REGS];
    uint32_t pa[P_REGS];
    float alpha[2], tile_sum[2];
    bool moved;
    constexpr bool LATE = LATE_ALPHA<E, D, LOOP, FOLD>;

    // FP8: O is kept in units of v_max, the largest V scale of the tiles this work tile reads, and tile j's P is
    // multiplied by vs_j / v_max, so O needs rescaling only when the max moves. V's scales are powers of two
    // (fp8_layout.pow2_scale): the factor is a shift of P's exponent, and P rounds to e4m3 exactly as unscaled.
    float v_max = 1.f;
    if constexpr (E::FP8) {
      v_max = 0.f;
      const int blocks = SB == 1 ? n_tiles : min(n_tiles * SB, kv_blocks);
      for (int blk = lane; blk < blocks; blk += 32) v_max = fmaxf(v_max, v_scale[blk]);
#pragma unroll
      for (int width = 16; width > 0; width /= 2) v_max = fmaxf(v_max, __shfl_xor_sync(0xffffffff, v_max, width));
    }

    mbar_wait(&sm.q_full, items & 1);
    if constexpr (TIMELINE) record_event(p, tw == 0, wg, items, EV_Q);

    // per-block scales are read before the barrier waits so their latency hides behind the copies and wgmma; a
    // tile's second block may lie past the sequence's last (its keys are masked), and reads that last one's scales
    auto scales = [&](int j, float (&ks)[SB], float (&vs)[SB]) {
#pragma unroll
      for (int h = 0; h < SB; ++h) {
        ks[h] = 1.f, vs[h] = 1.f;
        if constexpr (E::FP8) {
          const int blk = SB == 1 ? j : min(j * SB + h, kv_blocks - 1);
          ks[h] = k_scale[blk], vs[h] = v_scale[blk];
        }
      }
    };
    auto softmax_tile = [&](int j, const float (&ks)[SB], const float (&vs)[SB]) {
      float scale[SB], p_offset[SB], l_unit[SB];
#pragma unroll
      for (int h = 0; h < SB; ++h) {
        scale[h] = qk_scale * ks[h], p_offset[h] = E::P_SHIFT, l_unit[h] = 1.f;
        if constexpr (E::FP8) {
          const int shift = (__float_as_int(v_max) >> 23) - (__float_as_int(vs[h]) >> 23);  // v_max / vs = 2^shift
          p_offset[h] -= shift;
          l_unit[h] = __int_as_float((127 + shift) << 23);
        }
      }
      if (j * BLOCK_N >= n_full || (WINDOW && j * BLOCK_N < n_lo))
        moved = online_softmax<E, true, CAUSAL, LATE, WINDOW>(s_acc, st, scale, p_offset, l_unit, alpha, tile_sum,
                                                              j * BLOCK_N, row0, t.seqlen_k, t.diag, p.window_left);
      else
        moved = online_softmax<E, false, CAUSAL, LATE, false, MAX_BY_BITS<E, D, CAUSAL, FOLD>>(
            s_acc, st, scale, p_offset, l_unit, alpha, tile_sum, j * BLOCK_N, row0, t.seqlen_k, t.diag);
    };
    auto rescale = [&]() {
      if constexpr (LATE) {
        if (moved) {
#pragma unroll
          for (int i = 0; i < 2; ++i) alpha[i] = ex2(alpha[i]), st.l[i] *= alpha[i];
          scale_o<D>(o, alpha);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) st.l[i] += tile_sum[i];
      } else if (moved) {
        scale_o<D>(o, alpha);
      }
    };
    auto wait_s = [&]() { fence_regs(s_acc); };
    auto wait_o = [&]() {
      fence_regs(pa);
      for (int nb = 0; nb < D / O_COLS<D>; ++nb) fence_regs(o[nb]);
    };
    // one product alone, waited for, its K or V slot released: the serial loop's steps, and the overlapped loop's
    // first Q·Kᵀ and last P·V
    auto qk_alone = [&](int j) {
      mbar_wait(&sm.k_full[slot(j)], phase(j));
      wgmma_fence();
      issue_qk<E, D, BLOCK_M, BLOCK_N, FRESH_DESC>(s_acc, q_wg, sm.k[slot(j)]);
      wgmma_commit();
      wgmma_wait<0>();
      wait_s();
      release(sm.k_empty, j);
      release_q_after(j);
    };
    // the epilogue's per-row values: rows row0 and row0 + 8's sum over the quad, v_max / l (0 where l is) and LSE
    float l[2], inv[2], lse[2];
    auto row_totals = [&]() {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        l[i] = quad_reduce(st.l[i], [](float a, float b) { return a + b; });
        inv[i] = l[i] == 0.f ? 0.f : v_max / l[i];
        lse[i] = row_lse<E>(st.m[i], l[i]);
      }
    };
    // the 16-bit overlapped loop reckons them while its last P·V runs (BF16 d256 full, H100: +1.4-2.7%, session 44);
    // FP8 d256 and d64's three consumers spill with it, and the serial loop would carry them in its loop
    constexpr bool EARLY_TOTALS = LOOP == OVERLAP && !E::FP8 && D >= 128;
    auto pv_alone = [&](int j) {
      mbar_wait(&sm.v_full[slot(j)], phase(j));
      wait_o();
      wgmma_fence();
      issue_pv<E, D, BLOCK_N, FRESH_DESC>(o, pa, sm.v[slot(j)]);
      wgmma_commit();
      if constexpr (EARLY_TOTALS) row_totals();  // the overlapped loop's last P·V: every row sum is final
      wgmma_wait<0>();
      wait_o();
      release(sm.v_empty, j);
    };

    // left of this warpgroup's window: the others read them. Behind `if constexpr`: as a loop over n_first = 0 it
    // renumbered the other kernels' PTX registers, and ptxas scheduled the FP8 d128 causal kernels anew (session 52)
    if constexpr (WINDOW)
      for (int j = 0; j < n_first; ++j) pass_tile(j);
    if (LOOP == OVERLAP) {
      if (n_mine > n_first) {
        float ks[SB], vs[SB];
        scales(n_first, ks, vs);
        qk_alone(n_first);
        if constexpr (TIMELINE) record_event(p, tw == 0, wg, items, EV_FIRST);
        softmax_tile(n_first, ks, vs);
        rescale();
        pack_p<E>(s_acc, pa);
      }
      for (int j = n_first + 1; j < n_mine; ++j) {
        float ks[SB], vs[SB];
        scales(j, ks, vs);
        mbar_wait(&sm.k_full[slot(j)], phase(j));
        mbar_wait(&sm.v_full[slot(j - 1)], phase(j - 1));
        wait_o();
        wgmma_fence();
        issue_qk<E, D, BLOCK_M, BLOCK_N, FRESH_DESC>(s_acc, q_wg, sm.k[slot(j)]);
        wgmma_commit();
        issue_pv<E, D, BLOCK_N, FRESH_DESC>(o, pa, sm.v[slot(j - 1)]);
        wgmma_commit();
        wgmma_wait<1>();  // Q·Kᵀ(j) done; P·V(j-1) runs under the softmax
        wait_s();
        release(sm.k_empty, j);
        release_q_after(j);
        softmax_tile(j, ks, vs);
        wgmma_wait<0>();
        wait_o();
        release(sm.v_empty, j - 1);
        rescale();
        pack_p<E>(s_acc, pa);
      }
      if (n_mine > n_first) pv_alone(n_mine - 1);
    } else {
      if constexpr (TIMELINE) record_event(p, tw == 0, wg, items, EV_FIRST);  // kept out of the loop: its start
      for (int j = n_first; j < n_mine; ++j) {
        float ks[SB], vs[SB];
        scales(j, ks, vs);
        qk_alone(j);
        softmax_tile(j, ks, vs);
        rescale();
        pack_p<E>(s_acc, pa);
        pv_alone(j);
      }
    }
    if constexpr (TIMELINE) record_event(p, tw == 0, wg, items, EV_LOOP);
    for (int j = n_mine; j < n_tiles; ++j) pass_tile(j);  // past this warpgroup's rows: the others read them
    if ((!EARLY_Q<CLUSTER> || n_tiles == 0) && lane == 0) mbar_arrive(&sm.q_empty);  // n_tiles 0: Q was never read

    // epilogue: O · v_max / l; fully masked rows (l = 0) give zeros and lse = -inf. A tail segment writes fp32 to its
    // slot of the split workspace instead (merge_segments writes the output).
    const int tq = lane % 4;
    if (!EARLY_TOTALS || n_mine == n_first) row_totals();
    if (o_via_v()) consumers_sync<CONSUMERS>();  // every consumer's last P·V has read the V slots
    if ((O_STAGE || o_via_v()) && (!FOLD || wg_m0 >= 0) && wg_m0 + WG_ROWS <= t.seqlen_q &&
        (!SPLIT || t.split < 0)) {
      // this warpgroup's 64 rows, all inside the sequence, into its part of the O buffer (O_IN_V: of the V slots) in
      // Q's layout ([64 rows x 128 B] panels, 16-byte chunk c of row r at chunk c ^ (r % 8)), four 8-column chunks of
      // 8 rows per stmatrix (lane 8m + r addresses chunk c8 + m of row r), then one TMA store per panel; the previous
      // work tile's stores must have read the buffer first (O_IN_V: they have, before their warpgroup's o_free)
      uint8_t* o_wg = (O_IN_V ? sm.v[0] : o_buf) + cw * WG_ROWS * O_ROW_BYTES;
      if constexpr (O_STAGE) {
        if (tw == 0) tma_store_wait<true>();
        warpgroup_sync(cw);
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = (tw / 32) * 16 + 8 * i + lane % 8;
        const float f = inv[i];
#pragma unroll
        for (int c8 = 0; c8 < D / 8; c8 += 4) {
          const int chunk = c8 + lane / 8;
          const float* a = &o[c8 / (O_COLS<D> / 8)][c8 % (O_COLS<D> / 8) * 4 + i * 2];
          stmatrix_x4(o_wg + chunk / 8 * WG_ROWS * PANEL + r * PANEL + ((chunk % 8) ^ (r % 8)) * 16,
                      pack_half2<OutT>(a[0] * f, a[1] * f), pack_half2<OutT>(a[4] * f, a[5] * f),
                      pack_half2<OutT>(a[8] * f, a[9] * f), pack_half2<OutT>(a[12] * f, a[13] * f));
        }
      }
      fence_async_shared();
      warpgroup_sync(cw);
      if (tw == 0) {
        for (int pn = 0; pn < O_ROW_BYTES / PANEL; ++pn)
          tma_store(o_wg + pn * WG_ROWS * PANEL, &map_o, t.h * O_ROW_BYTES + pn * PANEL, t.q_start + wg_m0);
        tma_store_commit();
        if constexpr (O_IN_V) {
          tma_store_wait<true>();
          free_o();
        }
      }
    } else {
      free_o();
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = row0 + 8 * i;
        if (in_sequence<FOLD>(row, t.seqlen_q) && (!SPLIT || t.split < 0)) {
          OutT* out = static_cast<OutT*>(p.out) + (size_t)(t.q_start + row) * p.heads * D + t.h * D;
#pragma unroll
          for (int nb = 0; nb < D / O_COLS<D>; ++nb)
#pragma unroll
            for (int c8 = 0; c8 < O_COLS<D> / 8; ++c8) {
              const int col = nb * O_COLS<D> + c8 * 8 + 2 * tq;
              *reinterpret_cast<uint32_t*>(out + col) =
                  pack_half2<OutT>(o[nb][c8 * 4 + i * 2] * inv[i], o[nb][c8 * 4 + i * 2 + 1] * inv[i]);
            }
        }
        if constexpr (SPLIT) {
          if (in_sequence<FOLD>(row, t.seqlen_q) && t.split >= 0) {
            const size_t at = (size_t)t.split * BLOCK_M + row - t.m0;
            float* out = split.o + at * D;
#pragma unroll
            for (int nb = 0; nb < D / O_COLS<D>; ++nb)
#pragma unroll
              for (int c8 = 0; c8 < O_COLS<D> / 8; ++c8)
                *reinterpret_cast<float2*>(out + nb * O_COLS<D> + c8 * 8 + 2 * tq) =
                    make_float2(o[nb][c8 * 4 + i * 2] * inv[i], o[nb][c8 * 4 + i * 2 + 1] * inv[i]);
            if (tq == 0) split.lse[at] = lse[i];
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = row0 + 8 * i;
      if (tq == 0 && in_sequence<FOLD>(row, t.seqlen_q) && (!SPLIT || t.split < 0))
        p.lse[(size_t)t.h * p.total_q + t.q_start + row] = lse[i];
    }
    if constexpr (TIMELINE) record_event(p, tw == 0, wg, items, EV_END);
    if constexpr (TIMELINE) record_info(p, tw == 0, wg, items, w, n_mine - n_first, SPLIT && t.split >= 0);
    tiles += n_tiles;
    ++items;
  }
  if constexpr (O_STAGE || O_IN_V) {
    if (tw == 0) tma_store_wait<false>();  // the last stores are done before the CTA's shared memory goes
  }
  if constexpr (TIMELINE) record_edge(p, tw == 0, wg, true);
}

constexpr int MAX_SPLIT_CTAS = 512;  // CTAs of a launch that may split its tail (merge_segments' slot list)
constexpr int MERGE_ROWS = 8;        // rows per CTA of merge_segments, a warp each

// The shares whose segments cover split unit `unit`: first .. last (some may be empty, when there are fewer
// iterations than shares). The share holding iteration i is the last c with c x total / shares <= i.
template <int CLUSTER>
__host__ __device__ __forceinline__ void unit_shares(const TailSplit& split, int unit, int& first, int& last) {
  const int n = split.key_tiles, total = split.units * n, shares = split.grid / CLUSTER;
  first = ((unit * n + 1) * shares - 1) / total;
  last = ((unit + 1) * n * shares - 1) / total;
}

// acc[0..] += w x the components of v
__device__ __forceinline__ void add_scaled(float* acc, float w, float4 v) {
  acc[0] += w * v.x, acc[1] += w * v.y, acc[2] += w * v.z, acc[3] += w * v.w;
}
__device__ __forceinline__ void add_scaled(float* acc, float w, float2 v) { acc[0] += w * v.x, acc[1] += w * v.y; }

// The tail split's output: a CTA per MERGE_ROWS rows of a split work tile, a warp per row. The first warp lists the
// workspace slots of the segments of the tile's unit (FOLD: of its piece of the fold; causal: its parts); each row's
// O is then its segments' O weighted by exp(lse_s - lse), where lse = log sum exp(lse_s), and every lane reads its
// D / 32 columns of each segment. A tile no segment covers (no keys) gets zeros and lse = -inf.
template <int D, int BLOCK_M, int BLOCK_N, bool CAUSAL, int CLUSTER, bool FOLD, typename OutT>
__global__ void __launch_bounds__(32 * MERGE_ROWS) merge_segments(const Params p, const TailSplit split) {
  constexpr int COLS = D / 32;
  using Cols = std::conditional_t<COLS % 4 == 0, float4, float2>;  // a lane's loads: d64's 2 columns are one float2
  constexpr int VEC = sizeof(Cols) / sizeof(float);
  constexpr int TILES = FOLD ? 2 : CLUSTER;  // work tiles per unit
  __shared__ int slots[MAX_SPLIT_CTAS + 1];
  __shared__ int n_slots;
  const int unit = blockIdx.x / TILES, rank = blockIdx.x % TILES, lane = threadIdx.x % 32;
  WorkTile t;
  if (!tile_at<BLOCK_M, BLOCK_N, CAUSAL, CLUSTER, FOLD>(p, split.from + blockIdx.x, t) ||
      !in_sequence<FOLD>(t.m0 + blockIdx.y * MERGE_ROWS, t.seqlen_q))
    return;
  if (threadIdx.x < 32) {
    int n_long = t.n_tiles;  // FOLD: the long work tile's key tiles, where the short one's iterations start
    if constexpr (FOLD) {
      WorkTile long_tile;
      if (rank == 1)
        n_long = tile_at<BLOCK_M, BLOCK_N, true, 1, true>(p, split.from + 2 * unit, long_tile) ? long_tile.n_tiles : 0;
    }
    int first = 0, last = split.parts - 1, count = 0;
    if constexpr (!CAUSAL || FOLD) unit_shares<CLUSTER>(split, unit, first, last);
    for (int base = first; base <= last; base += 32) {
      const int c = base + lane;
      int slot = -1;  // the segment of share (causal: part) c on this work tile, if any
      if constexpr (FOLD) {
        if (c <= last) slot = fold_slot(split, c, unit, rank, n_long, t.n_tiles);
      } else if constexpr (CAUSAL) {
        if (c <= last) slot = causal_slot<CLUSTER>(split, unit, rank, c);
      } else {
        int u, begin, end;
        if (c <= last && tail_segment<CLUSTER>(split, c, 0, u, begin, end) && u == unit)
          slot = c * CLUSTER + rank;
        else if (c <= last && tail_segment<CLUSTER>(split, c, 1, u, begin, end) && u == unit)
          slot = split.grid + c * CLUSTER + rank;
      }
      const bool mine = slot >= 0;
      const unsigned ballot = __ballot_sync(0xffffffff, mine);
      if (mine) slots[count + __popc(ballot & ((1u << lane) - 1))] = slot;
      count += __popc(ballot);
    }
    if (lane == 0) n_slots = count;
  }
  __syncthreads();
  const int r = blockIdx.y * MERGE_ROWS + threadIdx.x / 32, row = t.m0 + r, n = n_slots;
  if (!in_sequence<FOLD>(row, t.seqlen_q)) return;
  const float* lse = split.lse + r;  // segment x's lse at lse[x * BLOCK_M]
  float m = -INFINITY;
  for (int k = lane; k < n; k += 32) m = fmaxf(m, lse[(size_t)slots[k] * BLOCK_M]);
#pragma unroll
  for (int width = 16; width > 0; width /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, width));
  float acc[COLS] = {}, sum = 0.f;
  for (int base = 0; m != -INFINITY && base < n; base += 32) {
    const float w_lane = base + lane < n ? __expf(lse[(size_t)slots[base + lane] * BLOCK_M] - m) : 0.f;
    sum += w_lane;
#pragma unroll 4
    for (int k = 0; k < min(32, n - base); ++k) {
      const float w = __shfl_sync(0xffffffff, w_lane, k);
      const Cols* o = reinterpret_cast<const Cols*>(
          split.o + ((size_t)slots[base + k] * BLOCK_M + r) * D + lane * COLS);
#pragma unroll
      for (int c = 0; c < COLS / VEC; ++c) add_scaled(acc + VEC * c, w, o[c]);
    }
  }
#pragma unroll
  for (int width = 16; width > 0; width /= 2) sum += __shfl_xor_sync(0xffffffff, sum, width);
  const float inv = sum == 0.f ? 0.f : 1.f / sum;
  OutT* out = static_cast<OutT*>(p.out) + (size_t)(t.q_start + row) * p.heads * D + t.h * D + lane * COLS;
#pragma unroll
  for (int c2 = 0; c2 < COLS / 2; ++c2)
    reinterpret_cast<uint32_t*>(out)[c2] = pack_half2<OutT>(acc[2 * c2] * inv, acc[2 * c2 + 1] * inv);
  if (lane == 0) p.lse[(size_t)t.h * p.total_q + t.q_start + row] = sum == 0.f ? -INFINITY : m + logf(sum);
}

// ------------------------------------------------------------------------------------------ host side

static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {  // static: see launch()
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

// 2D byte tensor (rows x cols, row stride = cols) read in [box_rows x 128 B] boxes, 128-byte swizzle, or in [box_rows
// x 64 B] ones with 64-byte swizzle (box_cols 64: FP8 d64's Q and K, QK_PANEL)
inline bool make_map(CUtensorMap* map, const void* base, uint64_t rows, uint64_t cols, uint32_t box_rows,
                     uint32_t box_cols = PANEL) {
  auto encode = encode_tiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {cols};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const auto swizzle = box_cols == PANEL ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// What a launch asks the runtime about its kernel on a device, asked once per (kernel, device) as the answers do not
// change between launches (each launch<>() instantiation keeps its own, static): the dynamic shared memory the kernel
// may take (cudaFuncSetAttribute) and, for pairs, the clusters resident at once (cudaOccupancyMaxActiveClusters).
struct KernelFacts {
  static constexpr int DEVICES = 64;  // devices beyond these ask on every launch
  std::atomic<bool> shared_memory_allowed[DEVICES];
  std::atomic<int> resident_clusters[DEVICES];  // 0: not asked yet

  template <class Kernel>
  cudaError_t allow_shared_memory(Kernel kernel, int smem, int device) {
    const bool kept = device < DEVICES;
    if (kept && shared_memory_allowed[device].load(std::memory_order_acquire)) return cudaSuccess;
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (kept && err == cudaSuccess) shared_memory_allowed[device].store(true, std::memory_order_release);
    return err;
  }

  template <class Kernel>
  cudaError_t clusters(int* count, Kernel kernel, const cudaLaunchConfig_t& config, int device) {
    const bool kept = device < DEVICES;
    if (kept && (*count = resident_clusters[device].load(std::memory_order_acquire)) > 0) return cudaSuccess;
    const cudaError_t err = cudaOccupancyMaxActiveClusters(count, kernel, &config);
    if (kept && err == cudaSuccess) resident_clusters[device].store(*count, std::memory_order_release);
    return err;
  }
};

// Codes of the C entries besides CUDA's own errors, carried through launch<>()'s cudaError_t
constexpr cudaError_t MAP_FAILED = static_cast<cudaError_t>(-1);   // a tensor map could not be made
constexpr cudaError_t UNSUPPORTED = static_cast<cudaError_t>(-2);  // no kernel for these arguments

// what every launch takes besides the kernel's template arguments
struct Launch {
  CUtensorMap q, k, v;
  Params p;
  int batch;
  int max_seqlen_q;
  int max_seqlen_k;
  int total_k;
  float* workspace;  // the tail split's segments (split_workspace_bytes); null: never split
  size_t workspace_bytes;
  int split_rounds;  // the most rounds of the SMs a causal launch of one CTA per work tile fills and still splits
  cudaStream_t stream;
};

// Tail segments per CTA: two (a share touches at most two units), four with folds (two pieces of each unit)
constexpr int segments_per_cta(bool fold) { return fold ? 4 : 2; }

// Bytes of the tail split's workspace for a launch of `ctas` CTAs of block_m rows at head dim d: segments_per_cta x
// ctas segments of O and lse in fp32. The Python launcher allocates it for the device's SM count
// (fa3fp8_split_workspace_bytes, attention_sm90._split_workspace).
inline long long split_workspace_bytes(int ctas, int block_m, int d, bool fold) {
  return (long long)segments_per_cta(fold) * ctas * block_m * (d + 1) * (long long)sizeof(float);
}

// Fewest key tiles that splitting must take off a tail unit's time: it pays each segment's fixed cost (its first
// Q·Kᵀ and softmax alone, its last P·V, the epilogue: ~2 tile iterations) twice and the merge's launch. A fold's
// share pays up to four segments: twice as many (H200, session 13: FP8 d128 folds at S4K, a split saving 8 of 33
// key tiles, ran 2.5% slower than unsplit; three consumers' folds there, saving 22 of 34, 6.2% faster).
constexpr int SPLIT_MIN_SAVING = 8;
constexpr int FOLD_SPLIT_MIN_SAVING = 2 * SPLIT_MIN_SAVING;

// The work units (a CTA's work tile, a pair's two, or a fold's two) of a launch's last round to split along their
// key_tiles key tiles over `shares` resident CTAs (pairs), or 0: the last round then takes ceil(units x key_tiles /
// shares) tile iterations instead of key_tiles, worth it when that saves min_saving.
inline int split_units(int units, int shares, int key_tiles, int min_saving) {
  const int tail = units % shares;
  const long long share = ((long long)tail * key_tiles + shares - 1) / shares;
  return tail > 0 && key_tiles - share >= min_saving ? tail : 0;
}

// Key tiles that causal row blocks first_blk to last_blk (a pair's two, or one) of block_m rows, the first `lead` of
// them before the first query (folds), see in a sequence of seqlen_q queries and seqlen_k keys, on tiles
// of block_n keys, counted as tile_at counts them; 0 when the blocks have no rows
inline int causal_key_tiles(int block_m, int block_n, int first_blk, int last_blk, int seqlen_q, int seqlen_k,
                            int lead) {
  WorkTile t{};
  t.seqlen_k = seqlen_k, t.diag = seqlen_k - seqlen_q;
  const int last_row = (last_blk + 1) * block_m - 1 - lead;
  return first_blk * block_m - lead < seqlen_q && last_row >= 0 ? (causal_keys(t, last_row) + block_n - 1) / block_n
                                                                : 0;
}

// Key tiles of the longest fold of m_blocks causal row blocks of BLOCK_M rows (m_blocks even), every sequence
// seqlen_q queries and seqlen_k keys long: a fold is row blocks m_blocks - 1 - f and f, their key tiles its
// iterations
template <int BLOCK_M, int BLOCK_N>
int fold_key_tiles(int m_blocks, int seqlen_q, int seqlen_k) {
  const int lead = fold_lead(BLOCK_M, m_blocks, seqlen_q);
  auto tiles = [&](int m_blk) { return causal_key_tiles(BLOCK_M, BLOCK_N, m_blk, m_blk, seqlen_q, seqlen_k, lead); };
  int most = 0;
  for (int f = 0; f < m_blocks / 2; ++f) most = max(most, tiles(m_blocks - 1 - f) + tiles(f));
  return most;
}

// Parts into which a causal launch of `units` work units (a CTA's work tile or a pair's two) on `shares` resident
// CTAs (pairs) cuts the keys of each unit of its last round (units % shares of them: all when fewer than shares), at
// most key_tiles key tiles, or 0: as many as fit in that round, where that takes min_saving key tiles off its longest
// unit's time. Equal parts keep the CTAs of heads that share K/V reading the same keys at once (L2 serves them);
// even shares of all units' key tiles, as the tail split deals them, would fill the last CTAs but scatter their reads
// (H200, session 26: 512 queries in pairs over 131072 keys, 64 units on 66 pairs, ran 7-9% slower split that way
// than unsplit).
inline int split_parts(int units, int shares, int key_tiles, int min_saving) {
  const int tail = shares > 0 ? units % shares : 0, parts = tail > 0 ? shares / tail : 0;
  return parts >= 2 && key_tiles - (key_tiles + parts - 1) / parts >= min_saving ? parts : 0;
}

// The split of a causal launch of one CTA per work tile: its work_tiles work tiles (numbered as tile_at numbers them:
// m_blocks row blocks of block_m rows per sequence and head, longest first), in units of `cluster`, on `shares`
// resident CTAs (pairs). Where the units fill at most split_rounds rounds, those of the last round, the work tiles
// from `from` on, are cut into the split_parts parts returned (0: nothing split), counting as many key tiles (of
// block_n keys) as the longest sequence's keys fill, or with `equal` lengths (every sequence max_seqlen_q queries and
// max_seqlen_k keys) those of the longest work tile cut: a head's longest where the cut reaches past from's head,
// else from's own.
inline int causal_split(int work_tiles, int m_blocks, int shares, int cluster, int split_rounds, int block_m,
                        int block_n, int max_seqlen_q, int max_seqlen_k, bool equal, int& from) {
  const int units = work_tiles / cluster, tail = shares > 0 ? units % shares : 0;
  from = work_tiles - tail * cluster;
  if (tail == 0 || units > (long long)split_rounds * shares) return 0;
  int key_tiles = (max_seqlen_k + block_n - 1) / block_n;
  if (equal) {
    const int rank = from + m_blocks >= work_tiles ? from % m_blocks : 0, m_blk = m_blocks - 1 - rank;
    const int first = cluster == 2 ? m_blk & ~1 : m_blk, last = cluster == 2 ? m_blk | 1 : m_blk;
    key_tiles = causal_key_tiles(block_m, block_n, first, last, max_seqlen_q, max_seqlen_k, 0);
  }
  return split_parts(units, shares, key_tiles, SPLIT_MIN_SAVING);
}

// The split of a launch of `work_tiles` work tiles on `ctas` resident CTAs, where the workspace holds it; else nothing
// split. A persistent launch (no causal mask, or folds) splits its last round where split_units finds one; a causal
// launch of one CTA per work tile where causal_split finds parts (a few queries over a long context). Folds split
// only when every sequence has the longest one's lengths (total = batch x longest, of queries and of keys): their
// iterations are then bounded by fold_key_tiles.
template <int BLOCK_M, int BLOCK_N, int D, bool CAUSAL, int CLUSTER, bool FOLD>
TailSplit plan_split(const Params& p, const Launch& l, int ctas) {
  constexpr int TILES = FOLD ? 2 : CLUSTER;  // work tiles per unit
  int key_tiles = (l.max_seqlen_k + BLOCK_N - 1) / BLOCK_N;
  const bool room = l.workspace != nullptr && ctas <= MAX_SPLIT_CTAS &&
                    split_workspace_bytes(ctas, BLOCK_M, D, FOLD) <= (long long)l.workspace_bytes;
  const bool equal = p.total_q == l.batch * l.max_seqlen_q && l.total_k == l.batch * l.max_seqlen_k;
  if constexpr (CAUSAL && !FOLD) {
    int from;
    const int parts = causal_split(p.work_tiles, p.m_blocks, ctas / CLUSTER, CLUSTER, l.split_rounds, BLOCK_M,
                                   BLOCK_N, l.max_seqlen_q, l.max_seqlen_k, equal, from);
    if (!room || parts == 0) return unsplit(p.work_tiles);
    const int grid = from + (p.work_tiles - from) * parts;
    return TailSplit{l.workspace, l.workspace + (size_t)segments_per_cta(FOLD) * ctas * BLOCK_M * D, from,
                     (p.work_tiles - from) / CLUSTER, key_tiles, grid, grid, parts};
  }
  if constexpr (FOLD) {
    key_tiles = equal ? fold_key_tiles<BLOCK_M, BLOCK_N>(p.m_blocks, l.max_seqlen_q, l.max_seqlen_k) : 0;
  }
  const int min_saving = FOLD ? FOLD_SPLIT_MIN_SAVING : SPLIT_MIN_SAVING;
  const int tail = key_tiles > 0 ? split_units(p.work_tiles / TILES, ctas / CLUSTER, key_tiles, min_saving) : 0;
  if (!room || tail == 0 || (long long)ctas * tail * key_tiles >= (1ll << 31)) return unsplit(p.work_tiles);
  const int from = p.work_tiles - tail * TILES, segments = segments_per_cta(FOLD) * ctas;
  return TailSplit{l.workspace, l.workspace + (size_t)segments * BLOCK_M * D, from, tail, key_tiles, ctas,
                   from + segments, 0};
}

// static: internal linkage, so that its KernelFacts are this library's own. A template function's local static has
// vague linkage otherwise, which the dynamic linker unifies across libraries loaded into one process (two builds of
// this one in benchmarks/kernel_ab.py: the second then took the first's "already allowed" and failed to launch).
template <class E, int D, int BLOCK_N, int STAGES, int CONSUMERS, bool CAUSAL, int LOOP, typename OutT,
          int CLUSTER = 1, bool FOLD = false, bool WINDOW = false>
static cudaError_t launch(const Launch& l) {
  constexpr int BLOCK_M = CONSUMERS * WG_ROWS;
  constexpr int THREADS = 128 * (CONSUMERS + 1);
  auto kernel = attn_fwd<E, D, BLOCK_N, STAGES, CONSUMERS, CAUSAL, LOOP, OutT, CLUSTER, FOLD, WINDOW>;
  constexpr int smem = sizeof(StorageFor<E, D, BLOCK_N, STAGES, CONSUMERS>) +
                       staged_o_bytes<E, D, BLOCK_N, STAGES, CONSUMERS>() + 1024;  // + the alignment to 1 KB
  static_assert(smem <= 227 * 1024, "more shared memory than an sm_90 CTA may have");
  static KernelFacts facts;
  int device, ctas;
  cudaError_t err;
  if ((err = cudaGetDevice(&device)) != cudaSuccess ||
      (err = facts.allow_shared_memory(kernel, smem, device)) != cudaSuccess ||
      (err = cudaDeviceGetAttribute(&ctas, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
    return err;
  Params p = l.p;
#if FA3FP8_TIMELINE
  p.timeline = timeline;
#endif
  constexpr int EVEN = CLUSTER == 2 || FOLD ? 2 : 1;  // row blocks per head rounded up to pairs or folds
  p.m_blocks = (l.max_seqlen_q + BLOCK_M * EVEN - 1) / (BLOCK_M * EVEN) * EVEN;
  p.work_tiles = p.m_blocks * l.batch * p.heads;
  if (p.work_tiles == 0) return cudaSuccess;
  // the output as 64-row boxes of 16-bit rows, for the kernels that stage O; the others never read the map
  CUtensorMap map_o{};
  if ((staged_o_bytes<E, D, BLOCK_N, STAGES, CONSUMERS>() > 0 || o_in_v<E, D, BLOCK_N, STAGES, CONSUMERS, LOOP>()) &&
      !make_map(&map_o, p.out, p.total_q, (uint64_t)p.heads * D * 2, WG_ROWS))
    return MAP_FAILED;
  TailSplit split = unsplit(p.work_tiles);
  // Without a causal mask, one CTA per SM (shared memory holds one) loops over the work tiles, all of one length.
  // Causal tiles differ in length, and dealt round-robin they leave some CTAs far more work than others (CTA 0
  // got every long row block at S16K: 448 TFLOPS against 620 in the H200 run); dealt longest first across heads
  // they lose L2's reuse of K and V at S64K (583 against 661). So a causal launch gives each CTA one work tile and
  // lets the hardware deal them in order, head by head and longest first; one of at most l.split_rounds rounds
  // splits its last round's work tiles (all of them when fewer than SMs) along the keys instead (plan_split). FOLD
  // deals persistent CTAs whole folds (a long and a short row block of one head, equal work for every fold).
  constexpr bool PERSISTENT = !CAUSAL || FOLD;
  constexpr bool SPLIT = splits_tail<E, D>() && !WINDOW;  // as the kernel's: windows never split
  int grid = FOLD ? p.work_tiles / 2 : p.work_tiles;
  cudaLaunchAttribute cluster;
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = CLUSTER, cluster.val.clusterDim.y = 1, cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.blockDim = dim3(THREADS);
  config.gridDim = dim3(grid);
  config.dynamicSmemBytes = smem;
  config.stream = l.stream;
  config.attrs = &cluster;
  config.numAttrs = CLUSTER == 2 ? 1 : 0;
  // a causal launch of one CTA per work tile may split only when it fills at most l.split_rounds rounds (plan_split)
  if (PERSISTENT || (SPLIT && p.work_tiles < (long long)ctas * l.split_rounds)) {
    // the CTAs resident at once: one per SM, or as many pairs as fit (a GPC with an odd number of free SMs leaves
    // one out)
    if constexpr (CLUSTER == 2) {
      if ((err = facts.clusters(&ctas, kernel, config, device)) != cudaSuccess) return err;
      if (ctas == 0) return cudaErrorInvalidConfiguration;
      ctas *= CLUSTER;
    }
    if (PERSISTENT) grid = min(grid, ctas);
    if constexpr (SPLIT) {
      split = plan_split<BLOCK_M, BLOCK_N, D, CAUSAL, CLUSTER, FOLD>(p, l, ctas);
      if (split.from < p.work_tiles) grid = split.grid;
    }
  }
  config.gridDim = dim3(grid);
  if ((err = cudaLaunchKernelEx(&config, kernel, l.q, l.k, l.v, map_o, p, split)) != cudaSuccess) return err;
  if constexpr (SPLIT) {
    if (split.from < p.work_tiles) {
      const dim3 merge_grid(p.work_tiles - split.from, BLOCK_M / MERGE_ROWS);
      merge_segments<D, BLOCK_M, BLOCK_N, CAUSAL, CLUSTER, FOLD, OutT>
          <<<merge_grid, 32 * MERGE_ROWS, 0, l.stream>>>(p, split);
      return cudaGetLastError();
    }
  }
  return cudaSuccess;
}

// launch<>() with the causal flag and the loop as template arguments; an unknown loop gives -2
template <class E, int D, int BLOCK_N, int STAGES, int CONSUMERS, typename OutT>
cudaError_t launch_loop(bool causal, int loop, const Launch& l) {
  if (loop == SERIAL)
    return causal ? launch<E, D, BLOCK_N, STAGES, CONSUMERS, true, SERIAL, OutT>(l)
                  : launch<E, D, BLOCK_N, STAGES, CONSUMERS, false, SERIAL, OutT>(l);
  if (loop == OVERLAP)
    return causal ? launch<E, D, BLOCK_N, STAGES, CONSUMERS, true, OVERLAP, OutT>(l)
                  : launch<E, D, BLOCK_N, STAGES, CONSUMERS, false, OVERLAP, OutT>(l);
  return UNSUPPORTED;
}

}  // namespace fa3fp8
