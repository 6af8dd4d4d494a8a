"""Runs fa3fp8's decode kernels (decode.py) under TRITON_INTERPRET=1 on small shapes and prints their errors
against the fp64 reference as JSON.

Started in a subprocess by test_decode.py, because the interpreter must be chosen before Triton kernels are
defined and must not leak into other tests. fp16 (bf16 dots are wrong in the interpreter).
"""

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402

import fa3fp8  # noqa: E402
from fa3fp8.decode import decode_fwd  # noqa: E402
from fa3fp8.reference import attention_decode_reference  # noqa: E402

# name -> batch, max_seqlen, heads, kv_heads, d, cache_seqlens (None: all), cache layout, late peak, launcher
# overrides. A late peak puts the highest score near each sequence's end, so that the running maxima of the
# split loop and of the merge both change after their first step (a missing rescale shows).
CASES = {
    "gqa4-ragged-0-1-D64": (3, 150, 8, 2, 64, [0, 1, 137], "dense", False, {}),
    "gqa8-full-D128": (2, 100, 16, 2, 128, None, "dense", False, {}),
    "mqa-D128-3splits": (2, 77, 4, 1, 128, [77, 30], "dense", False, dict(num_splits=3)),
    "mha-D256": (2, 70, 2, 2, 256, [65, 70], "dense", False, {}),
    "sliced-cache-D64": (2, 90, 8, 2, 64, [90, 41], "sliced", False, {}),
    "head-major-cache-D128": (2, 120, 8, 2, 128, [5, 120], "head-major", False, {}),
    "one-split-10-tiles-late-peak": (2, 160, 4, 1, 128, [155, 70], "dense", True, dict(num_splits=1, block_n=16)),
    "38-splits-merged-in-2-steps-late-peak": (2, 600, 4, 2, 64, [600, 333], "dense", True,
                                              dict(num_splits=64, block_n=16)),
    "all-empty": (2, 40, 4, 2, 64, [0, 0], "dense", False, {}),
    "zero-length-cache": (2, 0, 4, 2, 64, None, "dense", False, {}),
}
SCALE_CASE = (2, 50, 4, 2, 64, [50, 17])
# name -> (case, window_size): the splits share each sequence's window (its last left + 1 keys), so they start
# inside a key tile; a window of a few keys, one over 7 splits of 16 keys (ragged lengths: each sequence's window
# starts elsewhere), and one of the query's own key only
WINDOWED = {
    "window-40-ragged": ((3, 150, 8, 2, 64, [150, 1, 97], "dense", True, dict(num_splits=3)), (40, -1)),
    "window-100-7-splits": ((2, 600, 4, 2, 64, [600, 333], "dense", True, dict(num_splits=64, block_n=16)),
                            (100, -1)),
    "window-0-D128": ((2, 100, 16, 2, 128, None, "dense", False, {}), (0, 3)),
}


def caches(batch, max_seqlen, kv_heads, d, layout, gen):
    """k, v (batch, max_seqlen, kv_heads, d) views: contiguous, a slice of a longer buffer (batch and seq strides
    of the buffer), or the transpose of a head-major (batch, kv_heads, seq, d) buffer as transformers keeps it."""
    def draw(*shape):
        return torch.randn(*shape, generator=gen).half()

    if layout == "dense":
        return draw(batch, max_seqlen, kv_heads, d), draw(batch, max_seqlen, kv_heads, d)
    if layout == "sliced":
        return tuple(draw(batch + 1, max_seqlen + 37, kv_heads, d)[1:, 3 : max_seqlen + 3] for _ in range(2))
    return tuple(draw(batch, kv_heads, max_seqlen + 9, d)[:, :, :max_seqlen].transpose(1, 2) for _ in range(2))


def max_err(x, ref):
    return (x.double() - ref.double()).abs().max().item()


def run_case(batch, max_seqlen, heads, kv_heads, d, lens, layout, late_peak, overrides, softmax_scale=None,
             window_size=(-1, -1)):
    gen = torch.Generator().manual_seed(batch * max_seqlen + heads + d)
    q = torch.randn(heads, batch, d, generator=gen).half().transpose(0, 1)  # strided q too
    k, v = caches(batch, max_seqlen, kv_heads, d, layout, gen)
    if late_peak:
        for b, n in enumerate(lens):
            k[b, n - 2] = 2 * q[b, :: heads // kv_heads]  # each KV head: its group's first query head
    seqlens = None if lens is None else torch.tensor(lens, dtype=torch.int32)
    if overrides:
        scale = softmax_scale if softmax_scale is not None else d**-0.5
        out, lse = decode_fwd(q, k, v, seqlens, scale, window_size[0], **overrides)
    else:
        out, lse = fa3fp8.flash_attn_decode_func(
            q, k, v, seqlens, softmax_scale, return_lse=True, window_size=window_size
        )
    ref, ref_lse = attention_decode_reference(
        q, k, v, seqlens, softmax_scale, compute_dtype=torch.float64, window_size=window_size
    )
    same, _ = attention_decode_reference(
        q, k, v, seqlens, softmax_scale, compute_dtype=torch.float16, window_size=window_size
    )
    masked = torch.isinf(ref_lse)
    return {
        "err": max_err(out, ref), "torch_err": max_err(same, ref), "finite": bool(torch.isfinite(out).all()),
        "lse_err": max_err(lse[~masked], ref_lse[~masked]) if (~masked).any() else 0.0,
        "lse_inf_match": bool(torch.equal(torch.isinf(lse), masked)),
        "empty_rows_zero": bool((out[masked] == 0).all()),
        "shape_ok": out.shape == (batch, heads, d) and out.dtype == torch.float16 and lse.shape == (batch, heads),
    }


def main():
    results = {name: run_case(*case) for name, case in CASES.items()}
    results["softmax-scale-0.3"] = run_case(*SCALE_CASE, "dense", False, {}, softmax_scale=0.3)
    for name, (case, window) in WINDOWED.items():
        results[name] = run_case(*case, window_size=window)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
