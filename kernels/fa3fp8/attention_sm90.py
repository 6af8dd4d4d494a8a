"""Launcher of the CUDA C++ FP8 forward kernel (`csrc/attn_fp8_sm90.cu`): FlashAttention-3's structure on sm_90a.

A producer warpgroup streams Q and a ring of K/V tiles through TMA; two (or three) consumer warpgroups of 64 query
rows run Q·Kᵀ and P·V on wgmma, with Q·Kᵀ of tile j issued before P·V of tile j-1 so that the softmax of tile j
runs while the tensor cores work (`overlap`). Same inputs as the Triton kernel's FP8 path: the quantized bundle of
`quantize_qkv` with 128-key K/V tiles and 64- or 128-row Q tiles.
"""

import torch

from . import cuda_build

LOG2E = 1.4426950408889634
BLOCK_N = 128  # keys per K/V tile; also the bundle's K/V quantization block
HEAD_DIMS = (128, 256)
# head dim -> overlap, the faster on the H200 (benchmarks/results/attention-fp8-kernels-*.json): at d256 the
# overlapped loop spills (O is 128 registers per thread) and runs ~15% slower than the serial one
OVERLAP = {128: True, 256: False}
# where FA3FP8_KERNEL=auto picks this kernel over the Triton one: d256, +4-6% (932-962 against 883-923 TFLOPS at
# S16K); at d128 the two are level (735-768 against 738-766)
FASTER_HEAD_DIMS = (256,)


def supported(d: int, block_m: int, block_n: int) -> bool:
    """True when the kernel handles this head dim and these quantization blocks (else the Triton kernel runs)."""
    return d in HEAD_DIMS and block_n == BLOCK_N and block_m in (64, 128) and cuda_build.available()


def attention_fp8_fwd_sm90(
    q8, k8, v8t, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, softmax_scale, causal,
    q_scale, k_scale, v_scale, cu_blocks_q, cu_blocks_k, q_block, out_dtype, overlap=None, consumers=2,
):
    """Run the kernel on a packed FP8 bundle: q8 (Tq, H, D), k8 (Tk, Hkv, D), v8t (Hkv, D, n_blocks_k * 128), scales
    (heads, n_blocks). `overlap`: softmax(j) under P·V(j-1) (None: the head dim's default, OVERLAP); `consumers`:
    2 or 3 warpgroups of 64 query rows per CTA (3: d128 without overlap). Returns out (Tq, H, D) in out_dtype and
    lse (H, Tq) fp32."""
    total_q, heads, d = q8.shape
    overlap = OVERLAP[d] if overlap is None else overlap
    total_k, kv_heads, _ = k8.shape
    batch = cu_seqlens_q.shape[0] - 1
    out = torch.empty((total_q, heads, d), dtype=out_dtype, device=q8.device)
    lse = torch.empty((heads, total_q), dtype=torch.float32, device=q8.device)
    if total_q == 0 or batch == 0:
        return out, lse
    if total_k == 0:  # no keys anywhere (a TMA map needs at least one row): zeros, lse = -inf
        return out.zero_(), lse.fill_(float("-inf"))
    tensors = (q8, k8, v8t, out, lse, q_scale, k_scale, v_scale, cu_seqlens_q, cu_seqlens_k, cu_blocks_q, cu_blocks_k)
    code = cuda_build.load().fa3fp8_attn_fp8_fwd(
        *(t.data_ptr() for t in tensors),
        batch, heads, kv_heads, d, total_q, total_k, v8t.shape[-1], q_scale.shape[-1], k_scale.shape[-1],
        q_block, max_seqlen_q, softmax_scale * LOG2E, int(causal), int(overlap), consumers,
        int(out_dtype == torch.bfloat16), torch.cuda.current_stream(q8.device).cuda_stream,
    )
    if code != 0:
        raise RuntimeError(f"fa3fp8 CUDA kernel failed: {_error_message(code)}")
    return out, lse


def _error_message(code: int) -> str:
    if code == -1:
        return "could not make a TMA tensor map (misaligned or too large tensor)"
    if code == -2:
        return "unsupported head dim, consumer count or loop"
    return cuda_build.load().fa3fp8_error_string(code).decode()
