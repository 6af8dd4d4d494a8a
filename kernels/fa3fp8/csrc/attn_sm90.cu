// The C entries of the kernel library: each picks the kernel for its arguments (the launch_* functions) and
// launches it through launch<>() (attn_sm90.cuh).

#include "attn_sm90.cuh"

namespace fa3fp8 {

// BF16/FP16 d256 causal folds, compiled in a unit of their own (attn_sm90_d256_folds.cu)
template <class E>
cudaError_t launch_16bit_d256_folds(const Launch& l);

// d64, compiled in a unit of their own (attn_sm90_d64.cu): BF16 and FP16 to their own dtype, FP8 to either
template <class E, typename OutT>
cudaError_t launch_d64(bool causal, int loop, int consumers, bool fold, const Launch& l);

// FP8: 128-key tiles, and at d128 256-key ones in order (S takes 128 registers per thread: the overlapped loop,
// which holds the previous tile's P as well, spills and serializes its wgmma). The K/V ring holds as many stages as
// shared memory takes (d128: 4 of 128 keys, 3 of 256; d256: 2).
// cluster 2: pairs of CTAs sharing K/V, the overlapped loop on 128-key tiles; fold: causal, persistent CTAs dealt
// folds, the overlapped loop on 128-key tiles (both checked by the caller).
template <int D, typename OutT>
cudaError_t launch_fp8(bool causal, int loop, int block_n, int cluster, bool fold, const Launch& l) {
  constexpr int STAGES = D == 128 ? 4 : 2;
  if (cluster == 2)
    return causal ? launch<E4M3, D, 128, STAGES, 2, true, OVERLAP, OutT, 2>(l)
                  : launch<E4M3, D, 128, STAGES, 2, false, OVERLAP, OutT, 2>(l);
  if (fold) return launch<E4M3, D, 128, STAGES, 2, true, OVERLAP, OutT, 1, true>(l);
  if (block_n == 256)
    return causal ? launch<E4M3, 128, 256, 3, 2, true, SERIAL, OutT>(l)
                  : launch<E4M3, 128, 256, 3, 2, false, SERIAL, OutT>(l);
  return launch_loop<E4M3, D, 128, STAGES, 2, OutT>(causal, loop, l);
}

// three consumers only in order (with softmax under P·V they run out of registers and spill); cluster 2 and fold as
// above
template <typename OutT>
cudaError_t launch_fp8_three_consumers(bool causal, int cluster, bool fold, const Launch& l) {
  if (cluster == 2)
    return causal ? launch<E4M3, 128, 128, 4, 3, true, SERIAL, OutT, 2>(l)
                  : launch<E4M3, 128, 128, 4, 3, false, SERIAL, OutT, 2>(l);
  if (fold) return launch<E4M3, 128, 128, 4, 3, true, SERIAL, OutT, 1, true>(l);
  return causal ? launch<E4M3, 128, 128, 4, 3, true, SERIAL, OutT>(l)
                : launch<E4M3, 128, 128, 4, 3, false, SERIAL, OutT>(l);
}

// BF16/FP16: 2 stages of 176-key tiles at d128, 80-key ones at d256: Q and the ring fill shared memory (32 + 2 x 2 x
// 44 KB, 64 + 2 x 2 x 40 KB). On the H200 they ran 2-6% faster than 64-key tiles at d256 and level to 3% faster than
// 128-key tiles at d128 at S16K (kernels/NOTES.md). d128 also takes 128-key tiles in the overlapped loop, for
// lengths that 176 leaves a large masked remainder of (4096 keys: 24 tiles of 176, 3.1% padding; causal, 3% faster
// there on the H200). block_n is a supported width (checked by the caller). cluster 2: pairs of CTAs sharing K/V
// through multicast, the overlapped loop on the default tiles, or without a causal mask on d128's 128-key ones; fold:
// causal, persistent CTAs dealt folds, the overlapped loop, on 128-key tiles at d128 (both checked by the caller).
// Three consumers (d128, alone, paired or in causal folds): three warpgroups in order on 128-key tiles, M = 192, 160
// registers a thread (S 64 + O 64, then P 32 + O); three warps a scheduler hide more of each one's softmax chain
// than two overlapped (H200, session 21, paired, no causal mask: +2.5% at S4K, +1.2% at 8K, +2.7% at 16K, +3.3% at
// 64K against the better of two consumers' 128- and 176-key tiles; 6% behind at 2K, where 192-row blocks waste more
// rows).
template <class E>
cudaError_t launch_16bit(int d, int block_n, bool causal, int loop, int consumers, int cluster, bool fold,
                         const Launch& l) {
  using Out = typename E::Out;
  if (consumers == 3) {
    if (fold) return launch<E, 128, 128, 2, 3, true, SERIAL, Out, 1, true>(l);
    if (cluster == 2)
      return causal ? launch<E, 128, 128, 2, 3, true, SERIAL, Out, 2>(l)
                    : launch<E, 128, 128, 2, 3, false, SERIAL, Out, 2>(l);
    return causal ? launch<E, 128, 128, 2, 3, true, SERIAL, Out>(l) : launch<E, 128, 128, 2, 3, false, SERIAL, Out>(l);
  }
  if (cluster == 2) {
    if (causal)
      return d == 256 ? launch<E, 256, BLOCK_N_16BIT_D256, 2, 2, true, OVERLAP, Out, 2>(l)
                      : launch<E, 128, BLOCK_N_16BIT_D128, 2, 2, true, OVERLAP, Out, 2>(l);
    if (block_n == 128) return launch<E, 128, 128, 2, 2, false, OVERLAP, Out, 2>(l);
    return d == 256 ? launch<E, 256, BLOCK_N_16BIT_D256, 2, 2, false, OVERLAP, Out, 2>(l)
                    : launch<E, 128, BLOCK_N_16BIT_D128, 2, 2, false, OVERLAP, Out, 2>(l);
  }
  if (fold)
    return d == 256 ? launch_16bit_d256_folds<E>(l) : launch<E, 128, 128, 2, 2, true, OVERLAP, Out, 1, true>(l);
  if (d == 256) return launch_loop<E, 256, BLOCK_N_16BIT_D256, 2, 2, Out>(causal, loop, l);
  if (block_n == 128)
    return causal ? launch<E, 128, 128, 2, 2, true, OVERLAP, Out>(l)
                  : launch<E, 128, 128, 2, 2, false, OVERLAP, Out>(l);
  return launch_loop<E, 128, BLOCK_N_16BIT_D128, 2, 2, Out>(causal, loop, l);
}


// Causal attention in a sliding window (WINDOW): one CTA per work tile, unsplit, on each head dim's causal settings
// (attention_sm90.WINDOW_SETTINGS): three consumers in order at d128, two overlapped at d256 (80-key tiles at 16 bits).
// True when (d, loop, consumers, block_n, cluster, fold) are those settings.
inline bool window_settings(int d, int loop, int consumers, int block_n, int cluster, int fold, bool fp8) {
  const bool settings = d == 128 ? loop == SERIAL && consumers == 3 && block_n == 128
                                 : loop == OVERLAP && consumers == 2 && block_n == (fp8 ? 128 : BLOCK_N_16BIT_D256);
  return settings && cluster == 1 && fold == 0;
}

// d64 (attn_sm90_d64.cu), FP8 and 16-bit: 128-key tiles, two or three consumers, either loop, one CTA (no pairs),
// causal folds on the overlapped loop, no window; split along the keys as d128's (splits_tail)
inline bool d64_settings(int causal, int loop, int consumers, int block_n, int cluster, int fold, int split_rounds,
                         int window_left) {
  return (loop == SERIAL || loop == OVERLAP) && (consumers == 2 || consumers == 3) && block_n == 128 &&
         cluster == 1 && (fold == 0 || (fold == 1 && causal && loop == OVERLAP)) && split_rounds >= 1 &&
         window_left == -1;
}

template <class E>
cudaError_t launch_16bit_window(int d, const Launch& l) {
  using Out = typename E::Out;
  return d == 256 ? launch<E, 256, BLOCK_N_16BIT_D256, 2, 2, true, OVERLAP, Out, 1, false, true>(l)
                  : launch<E, 128, 128, 2, 3, true, SERIAL, Out, 1, false, true>(l);
}

template <typename OutT>
cudaError_t launch_fp8_window(int d, const Launch& l) {
  return d == 256 ? launch<E4M3, 256, 128, 2, 2, true, OVERLAP, OutT, 1, false, true>(l)
                  : launch<E4M3, 128, 128, 4, 3, true, SERIAL, OutT, 1, false, true>(l);
}

// The rest of a Launch beside its tensor maps and Params (sizes, split workspace, stream), as both entries take it
static void fill_launch(Launch& l, int batch, int max_seqlen_q, int max_seqlen_k, int total_k, void* workspace,
                        long long workspace_bytes, int split_rounds, int window_left, void* stream) {
  l.p.window_left = window_left;
  l.batch = batch;
  l.max_seqlen_q = max_seqlen_q;
  l.max_seqlen_k = max_seqlen_k;
  l.total_k = total_k;
  l.workspace = static_cast<float*>(workspace);
  l.workspace_bytes = workspace_bytes;
  l.split_rounds = split_rounds;
  l.stream = static_cast<cudaStream_t>(stream);
}

// Row block m of fa3fp8_window_tiles' sequence in blocks of BLOCK_M rows on BLOCK_N-key tiles: its tile_at WINDOW view
// and its warpgroups' window edges
template <int BLOCK_M, int BLOCK_N>
void window_block(const Params& p, int m, int* key0, int* n_tiles, int* n_full, int* first, int* lo) {
  WorkTile t;
  const bool rows = tile_at<BLOCK_M, BLOCK_N, true, 1, false, true>(p, p.m_blocks - 1 - m, t);  // counted from the last
  key0[m] = rows ? t.key0 : 0, n_tiles[m] = rows ? t.n_tiles : -1, n_full[m] = rows ? t.n_full : 0;
  for (int c = 0; c < BLOCK_M / WG_ROWS; ++c) {
    const int i = m * (BLOCK_M / WG_ROWS) + c;
    first[i] = lo[i] = 0;
    if (rows) window_edge<BLOCK_N>(t, t.m0 + c * WG_ROWS, WG_ROWS, p.window_left, first[i], lo[i]);
  }
}

extern "C" {

// FP8 forward on a quantize_qkv bundle. Returns 0 on success, -1 when a tensor map could not be made, -2 for an
// unsupported (head dim, consumers, loop, block_n, cluster, fold), else the CUDA error. d: 64, 128 or 256 (64:
// d64_settings only).
// loop: a Loop, SERIAL or OVERLAP; consumers: 2 or 3 warpgroups of 64 query rows (3: d128, SERIAL, 128 keys);
// block_n: keys per K/V tile, 128, or 256 at d128 (two consumers, SERIAL); cluster: 1, or 2 CTAs sharing each K/V
// tile (128 keys; two consumers OVERLAP, or three); fold: 1 runs causal attention in persistent CTAs dealt folds
// (128 keys; two consumers OVERLAP, or three), 0 one CTA per work tile. workspace: fa3fp8_split_workspace_bytes for
// the device's SM count and the fold flag, where the last round of a persistent launch (no causal mask, or folds)
// may be split along the keys (TailSplit); null never splits. split_rounds (at least 1): a causal launch of one CTA
// per work tile splits its last round where its work tiles fill at most this many rounds of the SMs. window_left: -1,
// or causal attention in a sliding window of window_left + 1 keys on the settings window_settings names.
int fa3fp8_attn_fp8_fwd(const void* q8, const void* k8, const void* v8t, void* out, float* lse, const float* q_scale,
                        const float* k_scale, const float* v_scale, const int* cu_q, const int* cu_k, const int* cu_bq,
                        const int* cu_bk, int batch, int heads, int kv_heads, int d, int total_q, int total_k,
                        int v_cols, int n_blocks_q, int n_blocks_k, int q_block, int max_seqlen_q, int max_seqlen_k,
                        float qk_scale_log2, int causal, int loop, int consumers, int block_n, int out_bf16,
                        int cluster, int fold, void* workspace, long long workspace_bytes, int split_rounds,
                        int window_left, void* stream) {
  if (d == 64) {
    if (!d64_settings(causal, loop, consumers, block_n, cluster, fold, split_rounds, window_left))
      return UNSUPPORTED;
  } else {
    if (window_left < -1 || (window_left >= 0 && (!causal || !window_settings(d, loop, consumers, block_n, cluster,
                                                                                fold, true))))
      return UNSUPPORTED;
    if ((d != 128 && d != 256) || split_rounds < 1 || (consumers != 2 && consumers != 3) ||
        (block_n != 128 && block_n != 256) || (consumers == 3 && (d != 128 || loop != SERIAL || block_n != 128)) ||
        (block_n == 256 && (d != 128 || loop != SERIAL)) || (cluster != 1 && cluster != 2) ||
        (cluster == 2 && (block_n != 128 || (consumers == 2 && loop != OVERLAP))) ||
        (fold != 0 && (fold != 1 || !causal || cluster != 1 || block_n != 128 || (consumers == 2 && loop != OVERLAP))))
      return UNSUPPORTED;
  }
  Launch l;
  const uint32_t qk_box = d < PANEL ? d : PANEL;  // FP8 d64: 64-byte rows (QK_PANEL)
  if (!make_map(&l.q, q8, total_q, (uint64_t)heads * d, consumers * WG_ROWS, qk_box) ||
      !make_map(&l.k, k8, total_k, (uint64_t)kv_heads * d, block_n / cluster, qk_box) ||
      !make_map(&l.v, v8t, (uint64_t)kv_heads * d, v_cols, d / cluster))
    return MAP_FAILED;
  l.p = Params{out,  lse,      q_scale, k_scale,    v_scale,    cu_q,    cu_k,         cu_bq, cu_bk,
               heads, kv_heads, total_q, n_blocks_q, n_blocks_k, q_block, qk_scale_log2};
  fill_launch(l, batch, max_seqlen_q, max_seqlen_k, total_k, workspace, workspace_bytes, split_rounds, window_left,
              stream);
  const bool c = causal != 0;
  cudaError_t err;
  if (d == 64)
    err = out_bf16 ? launch_d64<E4M3, __nv_bfloat16>(c, loop, consumers, fold != 0, l)
                   : launch_d64<E4M3, __half>(c, loop, consumers, fold != 0, l);
  else if (window_left >= 0)
    err = out_bf16 ? launch_fp8_window<__nv_bfloat16>(d, l) : launch_fp8_window<__half>(d, l);
  else if (consumers == 3)
    err = out_bf16 ? launch_fp8_three_consumers<__nv_bfloat16>(c, cluster, fold, l)
                   : launch_fp8_three_consumers<__half>(c, cluster, fold, l);
  else if (d == 256)
    err = out_bf16 ? launch_fp8<256, __nv_bfloat16>(c, loop, 128, cluster, fold, l)
                   : launch_fp8<256, __half>(c, loop, 128, cluster, fold, l);
  else
    err = out_bf16 ? launch_fp8<128, __nv_bfloat16>(c, loop, block_n, cluster, fold, l)
                   : launch_fp8<128, __half>(c, loop, block_n, cluster, fold, l);
  return static_cast<int>(err);
}

// BF16/FP16 forward on packed Q (Tq, H, D), K and V (Tk, Hkv, D), output in the inputs' dtype; d: 64, 128 or 256
// (64: d64_settings only); loop a Loop; consumers: 2 or 3 warpgroups of 64 query rows (3: d128, SERIAL, 128 keys);
// block_n: keys per K/V tile, the head dim's 176 (d128) or 80 (d256), or 128 at d128 (OVERLAP, or three consumers);
// cluster: 1, or 2 CTAs sharing each K/V tile (OVERLAP, the head dim's default tile, or 128 keys at d128 without a
// causal mask; three consumers too);
// fold: 1 runs causal attention in persistent CTAs dealt folds (OVERLAP, or three consumers; 128-key tiles at d128),
// 0 one CTA per work tile; workspace, split_rounds and window_left as above. Returns as above.
int fa3fp8_attn_fwd(const void* q, const void* k, const void* v, void* out, float* lse, const int* cu_q,
                    const int* cu_k, int batch, int heads, int kv_heads, int d, int total_q, int total_k,
                    int max_seqlen_q, int max_seqlen_k, float qk_scale_log2, int causal, int loop, int consumers,
                    int block_n, int bf16, int cluster, int fold, void* workspace, long long workspace_bytes,
                    int split_rounds, int window_left, void* stream) {
  if (d == 64) {
    if (!d64_settings(causal, loop, consumers, block_n, cluster, fold, split_rounds, window_left))
      return UNSUPPORTED;
  } else {
    if ((d != 128 && d != 256) || split_rounds < 1 || window_left < -1 ||
        (window_left >= 0 && (!causal || !window_settings(d, loop, consumers, block_n, cluster, fold, false))))
      return UNSUPPORTED;
    const int wide = d == 128 ? BLOCK_N_16BIT_D128 : BLOCK_N_16BIT_D256;
    const bool three = consumers == 3;
    const bool narrow = d == 128 && block_n == 128 && (three ? loop == SERIAL : loop == OVERLAP);
    if ((consumers != 2 && !three) || (three && !narrow) || (loop != SERIAL && loop != OVERLAP) ||
        (block_n != wide && !narrow) || (cluster != 1 && cluster != 2) ||
        (cluster == 2 && !three && (loop != OVERLAP || (block_n != wide && (!narrow || causal)))) ||
        (fold != 0 && (fold != 1 || !causal || (!three && loop != OVERLAP) || cluster != 1 ||
                       (d == 128 && block_n != 128))))
      return UNSUPPORTED;
  }
  Launch l;
  if (!make_map(&l.q, q, total_q, (uint64_t)heads * d * 2, consumers * WG_ROWS) ||
      !make_map(&l.k, k, total_k, (uint64_t)kv_heads * d * 2, block_n / cluster) ||
      !make_map(&l.v, v, total_k, (uint64_t)kv_heads * d * 2, block_n / cluster))
    return MAP_FAILED;
  l.p = Params{out, lse, nullptr, nullptr, nullptr, cu_q, cu_k, nullptr, nullptr, heads, kv_heads, total_q,
               0,   0,   0,       qk_scale_log2};
  fill_launch(l, batch, max_seqlen_q, max_seqlen_k, total_k, workspace, workspace_bytes, split_rounds, window_left,
              stream);
  const bool c = causal != 0;
  if (d == 64)
    return static_cast<int>(bf16 ? launch_d64<BF16, BF16::Out>(c, loop, consumers, fold != 0, l)
                                 : launch_d64<FP16, FP16::Out>(c, loop, consumers, fold != 0, l));
  if (window_left >= 0)
    return static_cast<int>(bf16 ? launch_16bit_window<BF16>(d, l) : launch_16bit_window<FP16>(d, l));
  return static_cast<int>(bf16 ? launch_16bit<BF16>(d, block_n, c, loop, consumers, cluster, fold != 0, l)
                               : launch_16bit<FP16>(d, block_n, c, loop, consumers, cluster, fold != 0, l));
}

const char* fa3fp8_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

// 1 where the kernels of head dim d (FP8, else BF16/FP16) may split their work along the keys (splits_tail): the
// Python launcher allocates the split's workspace for those only.
int fa3fp8_splits_tail(int d, int fp8) {
  if (fp8) return d == 64 ? splits_tail<E4M3, 64>() : d == 128 ? splits_tail<E4M3, 128>() : splits_tail<E4M3, 256>();
  return d == 64 ? splits_tail<BF16, 64>() : d == 128 ? splits_tail<BF16, 128>() : splits_tail<BF16, 256>();
}

// The tail split's workspace size, which the Python launcher allocates.
long long fa3fp8_split_workspace_bytes(int ctas, int block_m, int d, int fold) {
  return split_workspace_bytes(ctas, block_m, d, fold != 0);
}

// The tail split's rules, for tests without a GPU: split_units (fold: a fold split's threshold); and of a split of
// `units` units of `key_tiles` key tiles over `grid` CTAs in clusters of `cluster`, each share's segments (unit -1:
// none) at [seg x shares + c] and each unit's shares (unit_shares) at [unit].
int fa3fp8_split_units(int units, int shares, int key_tiles, int fold) {
  return split_units(units, shares, key_tiles, fold ? FOLD_SPLIT_MIN_SAVING : SPLIT_MIN_SAVING);
}

// A causal launch's split, for tests without a GPU: split_parts of `units` units on `shares` CTAs (pairs); and
// causal_split's parts, with its first work tile cut at *from
int fa3fp8_split_parts(int units, int shares, int key_tiles) {
  return split_parts(units, shares, key_tiles, SPLIT_MIN_SAVING);
}
int fa3fp8_causal_split(int work_tiles, int m_blocks, int shares, int cluster, int split_rounds, int block_m,
                        int block_n, int max_seqlen_q, int max_seqlen_k, int equal, int* from) {
  return causal_split(work_tiles, m_blocks, shares, cluster, split_rounds, block_m, block_n, max_seqlen_q,
                      max_seqlen_k, equal != 0, *from);
}

// A causal split's items, for tests without a GPU: of the work tiles from `from` on (n_tiles[i] key tiles for work
// tile from + i), `units` units of `cluster` cut into `parts` parts, item x's work tile (tile[x]) and key tiles
// (begin[x], end[x]), and the item that merge_segments reads for part c of work tile from + i (slot[i x parts + c])
void fa3fp8_causal_items(int from, int units, int parts, int cluster, const int* n_tiles, int* tile, int* begin,
                         int* end, int* slot) {
  const TailSplit split = {nullptr, nullptr, from, units, 0, 0, 0, parts};
  for (int x = 0; x < units * parts * cluster; ++x) {
    int part;
    tile[x] = cluster == 2 ? causal_item<2>(split, x, part) : causal_item<1>(split, x, part);
    causal_part(split, part, n_tiles[tile[x] - from], begin[x], end[x]);
  }
  for (int i = 0; i < units * cluster; ++i)
    for (int c = 0; c < parts; ++c)
      slot[i * parts + c] = cluster == 2 ? causal_slot<2>(split, i / 2, i % 2, c) : causal_slot<1>(split, i, 0, c);
}

void fa3fp8_tail_segments(int units, int key_tiles, int grid, int cluster, int* unit, int* begin, int* end,
                          int* first, int* last) {
  const TailSplit split = {nullptr, nullptr, 0, units, key_tiles, grid, 0, 0};
  const int shares = grid / cluster;
  for (int i = 0; i < 2 * shares; ++i) {
    const bool some = cluster == 2 ? tail_segment<2>(split, i % shares, i / shares, unit[i], begin[i], end[i])
                                   : tail_segment<1>(split, i % shares, i / shares, unit[i], begin[i], end[i]);
    if (!some) unit[i] = -1;
  }
  for (int u = 0; u < units; ++u) {
    if (cluster == 2)
      unit_shares<2>(split, u, first[u], last[u]);
    else
      unit_shares<1>(split, u, first[u], last[u]);
  }
}

// A fold split's rules, for tests without a GPU: of `units` folds whose work tiles have n_long[u] and n_short[u] key
// tiles, split as at most `key_tiles` iterations each over `grid` CTAs: each tail item x's work tile (2 x unit +
// piece, -1: none) and key tiles at tile[x], begin[x], end[x] (4 x grid items), and the workspace slots that
// merge_segments reads for work tile i, slots[i x grid ..] (n_slots[i] of them).
void fa3fp8_fold_segments(int units, int key_tiles, int grid, const int* n_long, const int* n_short, int* tile,
                          int* begin, int* end, int* slots, int* n_slots) {
  const TailSplit split = {nullptr, nullptr, 0, units, key_tiles, grid, 0, 0};
  for (int x = 0; x < segments_per_cta(true) * grid; ++x) {
    int unit, b, e;
    const int piece = x % 2;
    tile[x] = fold_segment(split, x, unit, b, e) &&
                      fold_piece(b, e, piece, n_long[unit], piece == 0 ? n_long[unit] : n_short[unit], begin[x], end[x])
                  ? 2 * unit + piece
                  : -1;
  }
  for (int i = 0; i < 2 * units; ++i) {
    const int unit = i / 2, piece = i % 2;
    int first, last;
    unit_shares<1>(split, unit, first, last);
    n_slots[i] = 0;
    for (int c = first; c <= last; ++c) {
      const int slot = fold_slot(split, c, unit, piece, n_long[unit], piece == 0 ? n_long[unit] : n_short[unit]);
      if (slot >= 0) slots[i * grid + n_slots[i]++] = slot;
    }
  }
}

// A sliding window's work tiles, for tests without a GPU: tile_at's WINDOW view of row block m of one sequence of
// seqlen_q queries and seqlen_k keys, in blocks of block_m rows on key tiles of block_n keys (window_settings': 192 x
// 128, 128 x 128, 128 x 80): at [m] its first key (key0), its key tiles (n_tiles) and where its first row's masked
// diagonal begins (n_full, keys from key0), n_tiles -1 for a block past the queries; at [m x block_m / 64 + c] its
// warpgroup c's window_edge (first, lo). Returns -2 for other blocks or tiles.
int fa3fp8_window_tiles(int block_m, int block_n, int seqlen_q, int seqlen_k, int window_left, int m_blocks,
                        int* key0, int* n_tiles, int* n_full, int* first, int* lo) {
  const int cu_q[2] = {0, seqlen_q}, cu_k[2] = {0, seqlen_k};
  Params p{};
  p.cu_q = cu_q, p.cu_k = cu_k, p.heads = 1, p.kv_heads = 1, p.m_blocks = m_blocks, p.window_left = window_left;
  using Block = void (*)(const Params&, int, int*, int*, int*, int*, int*);
  constexpr int N80 = BLOCK_N_16BIT_D256;
  Block block = block_m == 3 * WG_ROWS && block_n == 128   ? window_block<3 * WG_ROWS, 128>
                : block_m == 2 * WG_ROWS && block_n == 128 ? window_block<2 * WG_ROWS, 128>
                : block_m == 2 * WG_ROWS && block_n == N80 ? window_block<2 * WG_ROWS, N80>
                                                           : nullptr;
  if (block == nullptr) return static_cast<int>(UNSUPPORTED);
  for (int m = 0; m < m_blocks; ++m) block(p, m, key0, n_tiles, n_full, first, lo);
  return 0;
}

// fold_key_tiles of 128-key tiles for row blocks of block_m rows, 128 or 192 (-1 for others): a fold split's bound
int fa3fp8_fold_key_tiles(int block_m, int m_blocks, int seqlen_q, int seqlen_k) {
  if (block_m == 2 * WG_ROWS) return fold_key_tiles<2 * WG_ROWS, 128>(m_blocks, seqlen_q, seqlen_k);
  if (block_m == 3 * WG_ROWS) return fold_key_tiles<3 * WG_ROWS, 128>(m_blocks, seqlen_q, seqlen_k);
  return -1;
}

#if FA3FP8_TIMELINE
// TIMELINE builds (timeline.cuh): every later launch records into `records`, ctas CTAs' records of TIMELINE_ROLES x
// TIMELINE_WORDS 64-bit words each (null: no more records)
void fa3fp8_timeline(void* records, int ctas) { timeline = Timeline{static_cast<uint64_t*>(records), ctas}; }
#endif

}  // extern "C"

#if FA3FP8_TIMELINE
Timeline timeline{};
#endif

}  // namespace fa3fp8
