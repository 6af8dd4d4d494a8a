"""decode.py and flash_attn_decode_func: the split plan, input validation, the reference path and custom op on
the CPU, and the Triton kernels under TRITON_INTERPRET=1 (in a subprocess, interpret_decode_cases.py) against
the fp64 reference."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fa3fp8
from fa3fp8.decode import MERGE_BLOCK_S, MIN_GROUP_ROWS, TILES, _decode_merge, _decode_split, split_plan
from fa3fp8.reference import attention_decode_reference
from fa3fp8.testing import compile_for_hopper

HERE = Path(__file__).resolve().parent
INTERPRETED_IDS = [
    "gqa4-ragged-0-1-D64", "gqa8-full-D128", "mqa-D128-3splits", "mha-D256", "sliced-cache-D64",
    "head-major-cache-D128", "one-split-10-tiles-late-peak", "38-splits-merged-in-2-steps-late-peak", "all-empty",
    "zero-length-cache", "softmax-scale-0.3", "window-40-ragged", "window-100-7-splits", "window-0-D128",
]


@pytest.fixture(scope="module")
def interpreted():
    env = {**os.environ, "TRITON_INTERPRET": "1", "FA3FP8_BACKEND": "auto"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parents[1] / "kernels"), env.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, str(HERE / "interpret_decode_cases.py")], env=env, capture_output=True, text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


@pytest.mark.parametrize("case", INTERPRETED_IDS)
def test_kernel_matches_fp64_reference(interpreted, case):
    r = interpreted[case]
    assert r["finite"] and r["shape_ok"]
    assert r["err"] <= 2 * r["torch_err"] + 1e-3
    assert r["lse_err"] <= 1e-4
    assert r["lse_inf_match"] and r["empty_rows_zero"]


# ---------------------------------------------------------------------------------------------- sm_90 build

H100_SHARED_MEMORY = 227 * 1024
ALIGNED_ARGS = ("Q", "K", "V", "SEQLENS", "O_PART", "LSE_PART", "stride_qb", "stride_qh", "stride_kb", "stride_kn",
                "stride_kh", "stride_vb", "stride_vn", "stride_vh")


@pytest.mark.parametrize("window", [False, True])
@pytest.mark.parametrize("d", sorted(TILES))
def test_kernels_compile_for_hopper_with_pipelined_loads(d, window):
    block_n, warps, stages = TILES[d]
    split = compile_for_hopper(
        _decode_split,
        dict(Q="*bf16", K="*bf16", V="*bf16", SEQLENS="*i32", O_PART="*fp32", LSE_PART="*fp32", qk_scale="fp32"),
        dict(stride_qd=1, stride_kd=1, stride_vd=1, HKV=8, GROUP=4, D=d, BLOCK_H=MIN_GROUP_ROWS, BLOCK_N=block_n,
             HAS_SEQLENS=True, HAS_WINDOW=window),
        ALIGNED_ARGS, num_warps=warps, num_stages=stages,
    )
    assert "cp.async" in split.asm["ptx"]  # K/V tiles are prefetched while the current one is used
    assert split.metadata.shared <= H100_SHARED_MEMORY // 2  # two programs per SM
    compile_for_hopper(_decode_merge, dict(O_PART="*fp32", LSE_PART="*fp32", OUT="*bf16", LSE="*fp32"),
                       dict(D=d, BLOCK_S=MERGE_BLOCK_S), num_warps=4)


# ---------------------------------------------------------------------------------------------- split plan


@pytest.mark.parametrize("batch_kv", [1, 8, 64, 300])
@pytest.mark.parametrize("max_seqlen", [1, 64, 8191, 131072])
def test_split_plan_covers_the_cache_in_tiles(batch_kv, max_seqlen):
    splits, chunk = split_plan(batch_kv, max_seqlen, 64, 132)
    assert chunk % 64 == 0
    assert (splits - 1) * chunk < max_seqlen <= splits * chunk  # every split has keys, none are left over
    assert splits <= math.ceil(max_seqlen / 64)


def test_split_plan_fills_two_waves_of_the_gpu():
    # Llama-3.1-8B at 128K: batch 1 x 8 KV heads -> 33 splits of 4032 keys (63 tiles), 264 programs on 132 SMs
    splits, chunk = split_plan(8, 131072, 64, 132)
    assert (splits, chunk) == (33, 63 * 64)
    assert split_plan(64, 131072, 64, 132)[0] == 5  # batch 8: 320 programs
    assert split_plan(300, 131072, 64, 132)[0] == 1  # already more programs than two waves


def test_split_plan_takes_an_explicit_count_and_an_empty_cache():
    assert split_plan(4, 600, 16, 4, num_splits=64) == (38, 16)  # capped at one tile per split
    assert split_plan(4, 600, 16, 4, num_splits=5) == (5, 128)
    assert split_plan(8, 0, 64, 132) == (1, 64)


# ---------------------------------------------------------------------------------------------- validation


def _decode_args(**over):
    gen = torch.Generator().manual_seed(5)
    args = {
        "q": torch.randn(2, 8, 64, generator=gen).bfloat16(),
        "k_cache": torch.randn(2, 30, 2, 64, generator=gen).bfloat16(),
        "v_cache": torch.randn(2, 30, 2, 64, generator=gen).bfloat16(),
        "cache_seqlens": torch.tensor([30, 7], dtype=torch.int32),
    }
    return {**args, **over}


BAD = {
    "q-4d": (dict(q=torch.randn(2, 1, 8, 64).bfloat16()), "q must have shape \\(batch, heads, d\\)"),
    "q-fp32": (dict(q=torch.randn(2, 8, 64)), "q must be bfloat16 or float16"),
    "k-not-tensor": (dict(k_cache=[[0.0]]), "k_cache must be a torch.Tensor"),
    "k-3d": (dict(k_cache=torch.randn(2, 30, 64).bfloat16()), "k_cache must have shape"),
    "v-dtype": (dict(v_cache=torch.randn(2, 30, 2, 64).half()), "v_cache must have q's dtype"),
    "head-dim-96": (dict(q=torch.randn(2, 8, 96).bfloat16()), "head dim q.shape\\[-1\\] must be one of"),
    "k-head-dim": (dict(k_cache=torch.randn(2, 30, 2, 128).bfloat16(), v_cache=torch.randn(2, 30, 2, 128).bfloat16()),
                   "k_cache head dim must equal q's"),
    "v-shape": (dict(v_cache=torch.randn(2, 31, 2, 64).bfloat16()), "v_cache must have k_cache's shape"),
    "kv-heads-3": (dict(k_cache=torch.randn(2, 30, 3, 64).bfloat16(), v_cache=torch.randn(2, 30, 3, 64).bfloat16()),
                   "kv_heads"),
    "batch": (dict(k_cache=torch.randn(1, 30, 2, 64).bfloat16(), v_cache=torch.randn(1, 30, 2, 64).bfloat16()),
              "k_cache batch 1 must equal q batch 2"),
    "seqlens-int64": (dict(cache_seqlens=torch.tensor([30, 7])), "cache_seqlens must be an int32 tensor"),
    "seqlens-list": (dict(cache_seqlens=[30, 7]), "cache_seqlens must be an int32 tensor"),
    "seqlens-shape": (dict(cache_seqlens=torch.tensor([30, 7, 1], dtype=torch.int32)), "cache_seqlens must have shape"),
    "softmax-scale": (dict(softmax_scale=0.0), "softmax_scale"),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_input_names_the_argument(name):
    over, message = BAD[name]
    with pytest.raises(ValueError, match=message):
        fa3fp8.flash_attn_decode_func(**_decode_args(**over))


def test_device_mismatch_names_the_argument():
    args = _decode_args(k_cache=torch.randn(2, 30, 2, 64).bfloat16().to("meta"))
    with pytest.raises(ValueError, match="k_cache must be on q's device"):
        fa3fp8.flash_attn_decode_func(**args)


# ---------------------------------------------------------------------------------------------- CPU path


def test_reference_matches_masked_sdpa_in_fp64():
    """The oracle itself: per-sequence attention equals SDPA over the whole buffer with the invalid keys masked."""
    args = _decode_args()
    q, k, v, lens = (args[n].double() if n != "cache_seqlens" else args[n] for n in args)
    out, lse = attention_decode_reference(q, k, v, lens, compute_dtype=torch.float64)
    visible = torch.arange(k.shape[1])[None, :] < lens[:, None]  # (B, S)
    qh, kh, vh = q[:, :, None], k.transpose(1, 2), v.transpose(1, 2)
    expected = torch.nn.functional.scaled_dot_product_attention(
        qh, kh, vh, attn_mask=visible[:, None, None, :], enable_gqa=True
    )[:, :, 0]
    scores = (qh @ kh.repeat_interleave(4, 1).transpose(-1, -2))[:, :, 0] * 64**-0.5
    expected_lse = scores.masked_fill(~visible[:, None, :], -math.inf).logsumexp(-1)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(lse, expected_lse)


def test_reference_gives_zeros_without_keys_and_clamps_lengths():
    args = _decode_args(cache_seqlens=torch.tensor([0, 99], dtype=torch.int32))
    out, lse = attention_decode_reference(args["q"], args["k_cache"], args["v_cache"], args["cache_seqlens"])
    full, full_lse = attention_decode_reference(args["q"], args["k_cache"], args["v_cache"])
    assert (out[0] == 0).all() and torch.isinf(lse[0]).all() and (lse[0] < 0).all()
    torch.testing.assert_close(out[1], full[1])
    torch.testing.assert_close(lse[1], full_lse[1])


def test_cpu_falls_back_to_reference():
    args = _decode_args()
    args["k_cache"] = torch.randn(3, 40, 2, 64).bfloat16()[1:, 5:35]  # a slice of a larger buffer
    args["v_cache"] = torch.randn(3, 40, 2, 64).bfloat16()[1:, 5:35]
    out, lse = fa3fp8.flash_attn_decode_func(**args, softmax_scale=0.2, return_lse=True)
    ref, ref_lse = attention_decode_reference(*args.values(), softmax_scale=0.2)
    assert out.dtype == torch.bfloat16 and out.shape == (2, 8, 64) and lse.shape == (2, 8)
    torch.testing.assert_close(out, ref.to(torch.bfloat16))
    torch.testing.assert_close(lse, ref_lse)
    assert fa3fp8.flash_attn_decode_func(*list(args.values())[:3]).shape == (2, 8, 64)


def test_custom_op_passes_opcheck():
    args = _decode_args()
    op = torch.ops.fa3fp8.attn_decode.default
    torch.library.opcheck(op, (args["q"], args["k_cache"], args["v_cache"], args["cache_seqlens"], 0.125, -1))
    torch.library.opcheck(op, (args["q"], args["k_cache"], args["v_cache"], None, 0.125, 5))


def test_torch_compile_traces_through_the_op():
    args = _decode_args()
    compiled = torch.compile(lambda *a: fa3fp8.flash_attn_decode_func(*a) * 2, fullgraph=True)
    torch.testing.assert_close(compiled(*args.values()), fa3fp8.flash_attn_decode_func(*args.values()) * 2)
