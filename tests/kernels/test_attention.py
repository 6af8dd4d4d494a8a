"""The Triton kernels (attention.py, quantize.py) on the CPU under TRITON_INTERPRET=1, against the reference, and
the split quantization API (quantize_q, quantize_kv, assemble_qkv) on them against quantize_qkv; the attention
kernel compiled for sm_90.

The interpreter runs in a subprocess (interpret_cases.py) so that it never leaks into other tests; each case
it reports becomes one test here.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fa3fp8.attention import _attn_fwd
from fa3fp8.configs import TUNED
from fa3fp8.testing import compile_for_hopper

HERE = Path(__file__).resolve().parent
DENSE_IDS = [
    "dense-B2-Sq37-Sk70-H4-KV2-D64-full-float16",
    "dense-B2-Sq37-Sk70-H4-KV2-D64-causal-float16",
    "dense-B1-Sq1-Sk45-H8-KV1-D128-causal-float16",
    "dense-B1-Sq50-Sk20-H2-KV2-D64-causal-float16",
    "dense-B1-Sq40-Sk40-H2-KV2-D256-full-float16",
    "varlen-lens5_40_33-H4-KV2-D64-full",
    "varlen-lens5_40_33-H4-KV2-D64-causal",
    "varlen-lens5_40_33-H4-KV2-D64-causal-window6_-1",
]
WINDOWED_IDS = [  # interpret_cases.WINDOWED
    "B2-Sq37-Sk70-H4-KV2-D64-causal-window5_-1",
    "B2-Sq37-Sk70-H4-KV2-D64-full-window16_3",
    "B1-Sq70-Sk70-H2-KV1-D128-causal-window40_-1",
    "B1-Sq50-Sk20-H2-KV2-D64-full-window0_0",
    "B1-Sq50-Sk20-H2-KV2-D64-causal-window3_-1",
    "B1-Sq40-Sk40-H2-KV2-D256-full-window-1_7",
]
DENSE_IDS += ["dense-" + name for name in WINDOWED_IDS]
FP8_IDS = ["fp8-B2-Sq37-Sk70-H4-KV2-D64-full", "fp8-B1-Sq65-Sk65-H2-KV1-D128-causal",
           "fp8-B1-Sq50-Sk20-H2-KV2-D64-causal", "fp8-varlen-lens5_40_33-H4-KV2-D64-causal",
           *("fp8-" + name for name in WINDOWED_IDS)]
QUANT_IDS = [f"quantize-D{d}-{kind}" for d in (64, 128) for kind in (
    "hadamard", "v-transposed", "v-key-permuted", "hadamard-heads-major", "v-heads-major")]
SPLIT_QUANT_IDS = [f"split-quantize-D{d}-{order}" for d in (64, 128) for order in ("v-in-order", "v-key-permuted")]
ONE_LAUNCH_IDS = [f"one-launch-quantize-D{d}-{kind}" for d in (64, 128) for kind in ("hadamard", "plain")]


@pytest.fixture(scope="module")
def interpreted():
    env = {**os.environ, "TRITON_INTERPRET": "1", "FA3FP8_BACKEND": "auto"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parents[1] / "kernels"), env.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, str(HERE / "interpret_cases.py")], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


@pytest.mark.parametrize("case", DENSE_IDS)
def test_kernel_matches_fp64_reference(interpreted, case):
    r = interpreted[case]
    assert r["finite"]
    assert r["err"] <= 2 * r["torch_err"] + 1e-3
    assert r["lse_err"] <= 1e-4
    assert r["lse_inf_match"]


@pytest.mark.parametrize("case", FP8_IDS)
def test_fp8_kernel_matches_fp8_reference(interpreted, case):
    r = interpreted[case]
    assert r["finite"] and r["masked_rows_zero"]
    assert r["kernel_vs_fp8_ref"] <= 0.5 * r["fp8_ref_vs_exact"]
    assert r["lse_err"] <= 1e-4
    assert r["lse_inf_match"]


def test_a_window_reads_a_key_permuted_bundle_through_a_reordered_v(interpreted):
    assert interpreted["fp8-window-key-permuted-bundle"]["max_diff"] == 0.0


@pytest.mark.parametrize("case", QUANT_IDS)
def test_quantize_kernel_matches_reference(interpreted, case):
    r = interpreted[case]
    assert r["scale_rel_err"] <= 1e-5
    assert r["max_ulps"] <= 1.0
    assert r["mismatch_fraction"] <= 0.01
    assert r["tile_offsets_match"] and r["tile_offsets_where_given"]


@pytest.mark.parametrize("case", ONE_LAUNCH_IDS)
def test_one_launch_quantizes_as_the_parts_apart_bit_for_bit(interpreted, case):
    """Q, K and V in one launch (and K and V alone) give each part's quantize_blocks output, an empty sequence
    among them."""
    r = interpreted[case]
    assert r["qkv"] == [] and r["kv"] == [] and r["no_q"]


@pytest.mark.parametrize("case", SPLIT_QUANT_IDS)
def test_split_quantization_equals_quantize_qkv_bit_for_bit(interpreted, case):
    """Q and K/V quantized apart and assembled give quantize_qkv's bundle (dense and packed, V's keys in either
    order), and K/V quantized from a block boundary give the whole sequence's blocks from there: what a KV cache
    that quantizes only its new blocks relies on."""
    r = interpreted[case]
    assert r["dense"] == [] and r["packed"] == [] and r["suffix"] == []
    assert r["blocks"] == [2, 3]  # the suffix held a full and a partial block of the whole's three


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("window", [False, True], ids=["no-window", "window"])
def test_attention_kernel_compiles_for_hopper_on_wgmma(window, fp8):
    # the GPU tests run it; here the sm_90 build of each variant: tensor-core products, and a window's masked left
    # edge in no more shared memory than the kernel without it
    config = TUNED[(128, fp8)][0]
    data = "*fp8e4nv" if fp8 else "*bf16"

    def build(window):
        consts = dict(H=8, HKV=2, D=128, CAUSAL=True, WINDOW=window, IS_FP8=fp8, P_SHIFT=8.0 if fp8 else 0.0,
                      ROUND_FIRST=False, FAST_EXP=not fp8, **config.kwargs)
        signature = dict(Q=data, K=data, V=data, O="*bf16", LSE="*fp32", QS="*fp32", KS="*fp32", VS="*fp32",
                         CU_Q="*i32", CU_K="*i32", CU_BQ="*i32", CU_BK="*i32", qk_scale="fp32")
        return compile_for_hopper(_attn_fwd, signature, consts, ("Q", "K", "V", "O", "LSE"),
                                  num_warps=config.num_warps, num_stages=config.num_stages)

    kernel = build(window)
    assert "wgmma.mma_async" in kernel.asm["ptx"]
    assert kernel.metadata.shared <= build(False).metadata.shared
