"""Warp-specialized forward attention for Hopper in Gluon (Triton's explicit dialect), FlashAttention-3's structure.

One program (CTA) owns 128 query rows of one (sequence, head) and runs three partitions:
- a loader warp that streams K/V tiles into a ring of shared-memory stages with TMA, each stage guarded by a
  `ready` mbarrier (TMA bytes landed) and an `empty` mbarrier (both consumers done with it);
- two consumer warpgroups, 64 query rows each, that share the K/V stages. Each consumer pipelines within itself:
  it issues QKᵀ of tile j and PV of tile j-1 as asynchronous wgmma, waits for QKᵀ only, and computes the softmax of
  tile j while PV runs on the tensor cores. The two warpgroups have no CTA-wide barrier between them, so one's
  softmax also overlaps the other's wgmma.

Same inputs and semantics as `attention.attention_fwd` (packed sequences, GQA, bottom-right causal, FP8 with one
scale per tile of rows and V transposed tile by tile). Gluon kernels need a Hopper GPU to run; CPU tests compile
them for sm_90 (`tests/kernels/test_attention_ws.py`).
"""

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from .reference import P_SHIFT

LOG2E = 1.4426950408889634
# the TMA load was renamed after Triton 3.6 (the GPU image has 3.6, CI's CPU tests compile with a newer one)
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
WG_ROWS = gl.constexpr(64)  # query rows per consumer warpgroup (wgmma's M)
CTA_ROWS = gl.constexpr(128)  # two consumer warpgroups
# (head dim, fp8) -> (BLOCK_N, stages): K/V tile rows and ring depth, sized to shared memory (≤ 227 KB)
TILES = {
    (64, False): (128, 3), (128, False): (128, 2), (256, False): (64, 2),
    (64, True): (128, 3), (128, True): (128, 3), (256, True): (128, 2),
}
# consumers take turns issuing wgmma (FlashAttention-3's ping-pong): measured faster only for FP8 at d256
PINGPONG = {key: key == (256, True) for key in TILES}
MAXNREG = 168  # 12 warps (4 + 4 + 1 rounded up to a warpgroup) share 64K registers; setmaxnreg rebalances
CONSUMER_REGS = gl.constexpr(240)
LOADER_REGS = gl.constexpr(24)


@gluon.jit
def _load_partition(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bar, ready, empty,
                    q_row, q_col, k_row, kv_col, v_col, n_tiles,
                    BLOCK_N: gl.constexpr, STAGES: gl.constexpr, IS_FP8: gl.constexpr):
    mbarrier.expect(q_bar, 2 * desc_q.block_type.nbytes)
    _tma_load(desc_q, [q_row, q_col], q_bar, q_smem.index(0))
    _tma_load(desc_q, [q_row + WG_ROWS, q_col], q_bar, q_smem.index(1))
    for j in range(n_tiles):
        stage = j % STAGES
        mbarrier.wait(empty.index(stage), ((j // STAGES) & 1) ^ 1)
        bar = ready.index(stage)
        mbarrier.expect(bar, desc_k.block_type.nbytes + desc_v.block_type.nbytes)
        _tma_load(desc_k, [k_row + j * BLOCK_N, kv_col], bar, k_smem.index(stage))
        if IS_FP8:
            _tma_load(desc_v, [kv_col, v_col + j * BLOCK_N], bar, v_smem.index(stage))
        else:
            _tma_load(desc_v, [k_row + j * BLOCK_N, kv_col], bar, v_smem.index(stage))


@gluon.jit
def _softmax_tile(s, m_i, l_i, scale, n0, rows, cols, seqlen_k, diag, n_full,
                  CAUSAL: gl.constexpr, P_SHIFT: gl.constexpr):
    """FlashAttention-2 rescaling in base 2 on one raw score tile; masks only tiles at or past `n_full`."""
    s = s * scale
    if n0 >= n_full:
        visible = (n0 + cols)[None, :] < seqlen_k
        if CAUSAL:
            visible = visible & ((n0 + cols)[None, :] <= rows[:, None] + diag)
        s = gl.where(visible, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1))
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    p = gl.exp2(s - (m_use[:, None] - P_SHIFT))
    alpha = gl.exp2(m_i - m_use)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_i


@gluon.jit
def _take_turn(turn, WG: gl.constexpr, k, PINGPONG: gl.constexpr):
    """Ping-pong: wait until the other consumer has issued its k-th group of wgmma (consumer 0 goes first)."""
    if PINGPONG:
        mbarrier.wait(turn.index(WG), k & 1)


@gluon.jit
def _pass_turn(turn, WG: gl.constexpr, PINGPONG: gl.constexpr):
    """Ping-pong: let the other consumer issue its wgmma while this one runs its softmax."""
    if PINGPONG:
        mbarrier.arrive(turn.index(1 - WG), count=1)


@gluon.jit
def _consume_partition(q_smem, k_smem, v_smem, q_bar, ready, empty, turn, O, LSE, KS, VS,
                       qk_scale, q_start, seqlen_q, seqlen_k, diag, m0, h, n_tiles, n_full, kblk, out_stride,
                       total_q, WG: gl.constexpr, D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                       CAUSAL: gl.constexpr, IS_FP8: gl.constexpr, P_SHIFT: gl.constexpr, PINGPONG: gl.constexpr):
    dtype: gl.constexpr = k_smem.dtype
    k_instr: gl.constexpr = 256 // dtype.primitive_bitwidth
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, k_instr])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, D, k_instr])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout,
                                                 k_width=32 // dtype.primitive_bitwidth)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)

    m_wg = m0 + WG * WG_ROWS
    rows = m_wg + gl.arange(0, WG_ROWS, layout=row_s)
    cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    zero_s = gl.zeros([WG_ROWS, BLOCK_N], gl.float32, s_layout)
    acc = gl.zeros([WG_ROWS, D], gl.float32, o_layout)
    m_i = gl.full([WG_ROWS], float("-inf"), gl.float32, row_s)
    l_i = gl.zeros([WG_ROWS], gl.float32, row_s)
    q = q_smem.index(WG)
    mbarrier.wait(q_bar, 0)

    # tile 0 (every program has at least one: an empty range is one fully masked tile)
    mbarrier.wait(ready.index(0), 0)
    _take_turn(turn, WG, 0, PINGPONG)
    s = warpgroup_mma(q, k_smem.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    _pass_turn(turn, WG, PINGPONG)
    s = warpgroup_mma_wait(0, deps=(s,))
    scale = qk_scale
    vs = 1.0
    if IS_FP8:
        has_keys = seqlen_k > 0  # an empty key range has no scale entry to read
        scale = qk_scale * gl.load(KS + kblk, mask=has_keys, other=1.0)
        vs = gl.load(VS + kblk, mask=has_keys, other=1.0)
    p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, scale, 0, rows, cols, seqlen_k, diag, n_full, CAUSAL, P_SHIFT)
    p_op = gl.convert_layout(p.to(dtype), p_layout)

    for j in range(1, n_tiles):
        stage = j % STAGES
        prev = (j - 1) % STAGES
        mbarrier.wait(ready.index(stage), (j // STAGES) & 1)
        _take_turn(turn, WG, j, PINGPONG)
        s = warpgroup_mma(q, k_smem.index(stage).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        if IS_FP8:
            v_prev = v_smem.index(prev).permute((1, 0))
        else:
            v_prev = v_smem.index(prev)
        acc = warpgroup_mma(p_op, v_prev, acc, is_async=True)
        _pass_turn(turn, WG, PINGPONG)
        s = warpgroup_mma_wait(1, deps=(s,))
        rescale = 1.0
        if IS_FP8:
            scale = qk_scale * gl.load(KS + kblk + j)
            vs_next = gl.load(VS + kblk + j)
            rescale = vs / vs_next  # acc is kept in units of the V tile's scale that it will be added to next
            vs = vs_next
        p, alpha, m_i, l_i = _softmax_tile(s, m_i, l_i, scale, j * BLOCK_N, rows, cols, seqlen_k, diag, n_full,
                                           CAUSAL, P_SHIFT)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty.index(prev), count=1)
        acc = acc * gl.convert_layout(alpha * rescale, row_o)[:, None]

    last = (n_tiles - 1) % STAGES
    if IS_FP8:
        v_last = v_smem.index(last).permute((1, 0))
    else:
        v_last = v_smem.index(last)
    _take_turn(turn, WG, n_tiles, PINGPONG)
    acc = warpgroup_mma(p_op, v_last, acc, is_async=True)
    _pass_turn(turn, WG, PINGPONG)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty.index(last), count=1)

    # epilogue: normalize; fully masked rows (l = 0) give zeros and lse = -inf
    l_o = gl.convert_layout(l_i, row_o)
    out = acc * (vs / gl.where(l_o == 0.0, 1.0, l_o))[:, None]
    lse = (m_i - P_SHIFT + gl.log2(l_i)) * 0.6931471805599453
    out_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // D, D // 8], [4, 1], [1, 0])
    out = gl.convert_layout(out.to(O.dtype.element_ty), out_layout)
    o_rows = m_wg + gl.arange(0, WG_ROWS, layout=gl.SliceLayout(1, out_layout))
    o_cols = gl.arange(0, D, layout=gl.SliceLayout(0, out_layout))
    o_ptrs = O + (q_start + o_rows)[:, None] * out_stride + h * D + o_cols[None, :]
    gl.store(o_ptrs, out, mask=(o_rows < seqlen_q)[:, None])
    gl.store(LSE + h * total_q + q_start + rows, lse, mask=rows < seqlen_q)


@gluon.jit
def _attn_fwd_ws(
    Q, K, V, O, LSE, QS, KS, VS, CU_Q, CU_K, CU_BQ, CU_BK,
    qk_scale, total_q, total_k, v_cols, n_blocks_q, n_blocks_k,
    H: gl.constexpr, HKV: gl.constexpr, D: gl.constexpr, CAUSAL: gl.constexpr, IS_FP8: gl.constexpr,
    P_SHIFT: gl.constexpr, Q_BLOCK: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
    PINGPONG: gl.constexpr,
):
    pid_m = gl.program_id(0)
    pid_bh = gl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    hk = h // (H // HKV)
    q_start = gl.load(CU_Q + b)
    seqlen_q = gl.load(CU_Q + b + 1) - q_start
    k_start = gl.load(CU_K + b)
    seqlen_k = gl.load(CU_K + b + 1) - k_start
    if CAUSAL:
        m_blk = gl.num_programs(0) - 1 - pid_m  # longest rows first: better tail balance
    else:
        m_blk = pid_m
    m0 = m_blk * CTA_ROWS
    diag = seqlen_k - seqlen_q  # bottom-right causal alignment
    if CAUSAL:
        hi = gl.maximum(gl.minimum(seqlen_k, m0 + CTA_ROWS + diag), 0)
    else:
        hi = seqlen_k
    hi = gl.where(m0 < seqlen_q, hi, 0)
    n_tiles = gl.maximum(gl.cdiv(hi, BLOCK_N), 1)

    dtype: gl.constexpr = K.dtype.element_ty
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([WG_ROWS, D], dtype)
    k_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D], dtype)
    desc_q = tma.make_tensor_descriptor(Q, shape=[total_q, H * D], strides=[H * D, 1],
                                        block_shape=[WG_ROWS, D], layout=q_layout)
    desc_k = tma.make_tensor_descriptor(K, shape=[total_k, HKV * D], strides=[HKV * D, 1],
                                        block_shape=[BLOCK_N, D], layout=k_layout)
    kblk = gl.to_tensor(0)  # this sequence's first K/V tile: scale index, and V column / BLOCK_N
    if IS_FP8:
        v_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([D, BLOCK_N], dtype)
        desc_v = tma.make_tensor_descriptor(V, shape=[HKV * D, v_cols], strides=[v_cols, 1],
                                            block_shape=[D, BLOCK_N], layout=v_layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, D, BLOCK_N], v_layout)
        cu_bk = gl.load(CU_BK + b)
        kblk = hk * n_blocks_k + cu_bk
        v_col = cu_bk * BLOCK_N
        q_blocks = h * n_blocks_q + gl.load(CU_BQ + b)
        qs0 = gl.load(QS + q_blocks + m0 // Q_BLOCK, mask=m0 < seqlen_q, other=1.0)
        qs1 = gl.load(QS + q_blocks + (m0 + WG_ROWS) // Q_BLOCK, mask=m0 + WG_ROWS < seqlen_q, other=1.0)
    else:
        desc_v = tma.make_tensor_descriptor(V, shape=[total_k, HKV * D], strides=[HKV * D, 1],
                                            block_shape=[BLOCK_N, D], layout=k_layout)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], k_layout)
        v_col = gl.to_tensor(0)
        qs0 = 1.0
        qs1 = 1.0
    q_smem = gl.allocate_shared_memory(dtype, [2, WG_ROWS, D], q_layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D], k_layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)
    mbarrier.arrive(turn.index(0), count=1)  # consumer 0 issues its wgmma first
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrival per consumer warpgroup

    # key tiles every row of a warpgroup sees entirely need no mask
    if CAUSAL:
        n_full0 = gl.maximum(gl.minimum(seqlen_k, m0 + 1 + diag), 0) // BLOCK_N * BLOCK_N
        n_full1 = gl.maximum(gl.minimum(seqlen_k, m0 + WG_ROWS + 1 + diag), 0) // BLOCK_N * BLOCK_N
    else:
        n_full0 = seqlen_k // BLOCK_N * BLOCK_N
        n_full1 = n_full0
    gl.warp_specialize([
        (_consume_partition, (q_smem, k_smem, v_smem, q_bar, ready, empty, turn, O, LSE, KS, VS, qk_scale * qs0, q_start,
                              seqlen_q, seqlen_k, diag, m0, h, n_tiles, n_full0, kblk, H * D, total_q,
                              gl.constexpr(0), D, BLOCK_N, STAGES, CAUSAL, IS_FP8, P_SHIFT, PINGPONG)),
        (_consume_partition, (q_smem, k_smem, v_smem, q_bar, ready, empty, turn, O, LSE, KS, VS, qk_scale * qs1, q_start,
                              seqlen_q, seqlen_k, diag, m0, h, n_tiles, n_full1, kblk, H * D, total_q,
                              gl.constexpr(1), D, BLOCK_N, STAGES, CAUSAL, IS_FP8, P_SHIFT, PINGPONG)),
        (_load_partition, (desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bar, ready, empty,
                           q_start + m0, h * D, k_start, hk * D, v_col, n_tiles, BLOCK_N, STAGES, IS_FP8)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


def _alloc(size: int, alignment: int, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def supported(d: int, is_fp8: bool, block_n: int | None = None) -> bool:
    """Whether the warp-specialized kernel has a tile for this head dim (and, for FP8, this K/V block)."""
    tile = TILES.get((d, is_fp8))
    return tile is not None and (block_n is None or tile[0] == block_n)


def _constexprs(heads: int, kv_heads: int, d: int, causal: bool, is_fp8: bool, q_block: int | None) -> dict:
    """The kernel's compile-time arguments for one launch shape (shared by the launcher and `compile_offline`)."""
    block_n, stages = TILES[(d, is_fp8)]
    return dict(H=heads, HKV=kv_heads, D=d, CAUSAL=causal, IS_FP8=is_fp8, P_SHIFT=float(P_SHIFT) if is_fp8 else 0.0,
                Q_BLOCK=q_block or WG_ROWS.value, BLOCK_N=block_n, STAGES=stages, PINGPONG=PINGPONG[(d, is_fp8)])


def attention_fwd_ws(
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, softmax_scale, causal,
    q_scale=None, k_scale=None, v_scale=None, cu_blocks_q=None, cu_blocks_k=None, q_block=None, out_dtype=None,
):
    """Launch the warp-specialized kernel; arguments and results as `attention.attention_fwd` (plus `q_block`, the
    FP8 quantizer's Q tile rows). Returns out (Tq, H, D), lse (H, Tq) fp32 and the compiled kernel."""
    total_q, heads, d = q.shape
    total_k, kv_heads, _ = k.shape
    batch = cu_seqlens_q.shape[0] - 1
    is_fp8 = q_scale is not None
    out = torch.empty(q.shape, dtype=out_dtype or q.dtype, device=q.device)
    lse = torch.empty((heads, total_q), dtype=torch.float32, device=q.device)
    if total_q == 0 or batch == 0:
        return out, lse, None
    if is_fp8:
        scales = (q_scale, k_scale, v_scale, cu_blocks_q, cu_blocks_k)
        v_cols, n_blocks_q, n_blocks_k = v.shape[-1], q_scale.shape[-1], k_scale.shape[-1]
    else:
        scales = (cu_seqlens_q,) * 5  # the FP8-only pointers are never read
        v_cols, n_blocks_q, n_blocks_k = 0, 0, 0
    triton.set_allocator(_alloc)
    grid = (triton.cdiv(max_seqlen_q, CTA_ROWS.value), batch * heads)
    kernel = _attn_fwd_ws[grid](
        q, k, v, out, lse, *scales[:3], cu_seqlens_q, cu_seqlens_k, *scales[3:],
        softmax_scale * LOG2E, total_q, total_k, v_cols, n_blocks_q, n_blocks_k,
        **_constexprs(heads, kv_heads, d, causal, is_fp8, q_block), num_warps=4, maxnreg=MAXNREG,
    )
    return out, lse, kernel


def compile_offline(d: int, is_fp8: bool, causal: bool, heads: int = 16, kv_heads: int = 16):
    """Compile the kernel for sm_90 without a GPU (Triton's own ptxas): for CPU tests and for reading its SASS."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    data = "*fp8e4nv" if is_fp8 else "*bf16"
    pointers = dict(Q=data, K=data, V=data, O="*bf16", LSE="*fp32", QS="*fp32", KS="*fp32", VS="*fp32",
                    CU_Q="*i32", CU_K="*i32", CU_BQ="*i32", CU_BK="*i32")
    scalars = dict(qk_scale="fp32", total_q="i32", total_k="i32", v_cols="i32", n_blocks_q="i32", n_blocks_k="i32")
    consts = _constexprs(heads, kv_heads, d, causal, is_fp8, None)
    signature = {**pointers, **scalars, **{name: "constexpr" for name in consts}}
    source = GluonASTSource(_attn_fwd_ws, signature, consts)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, maxnreg=MAXNREG))
