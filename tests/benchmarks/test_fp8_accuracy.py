"""benchmarks/fp8_accuracy.py on the CPU, where fa3fp8's FP8 is the reference's: its variants and its plot."""

import pytest
import torch

from fa3fp8.reference import attention_fp8_reference, attention_reference, quantize_qkv_reference
from fa3fp8.testing import random_qkv, rmse

SHAPE = (1, 384, 2, 1, 128, True)  # batch, seqlen, heads, kv_heads, d, causal


def draw(seed):
    """Draw `seed` of SHAPE: v, the fp64 reference output, cu_seqlens and packed (q, k, v)."""
    batch, seqlen, heads, kv_heads, d, causal = SHAPE
    q, k, v = random_qkv(batch, seqlen, seqlen, heads, kv_heads, d, torch.bfloat16, "cpu", seed=seed, outliers=True)
    ref, _ = attention_reference(q, k, v, causal=causal, compute_dtype=torch.float64)
    packed = [x.reshape(-1, *x.shape[2:]) for x in (q, k, v)]
    return v, ref, torch.tensor([0, seqlen], dtype=torch.int32), packed


@pytest.fixture(scope="module")
def errors(accuracy):
    return accuracy.shape_errors(SHAPE, draws=2, device="cpu")


def test_fa3fp8_is_the_rotated_per_block_math_averaged_over_the_draws(errors):
    causal = SHAPE[-1]
    by_draw = []
    for seed in range(2):
        _, ref, cu, packed = draw(seed)
        out, _ = attention_fp8_reference(quantize_qkv_reference(*packed, cu, cu, 64, 128), causal=causal)
        by_draw.append(rmse(out.to(torch.bfloat16), ref.reshape(out.shape)))  # fa3fp8 returns q's dtype
    assert errors["fa3fp8"] == pytest.approx(sum(by_draw) / 2, rel=1e-6)


def test_the_rotation_lowers_the_error_with_either_scaling(errors):
    assert set(errors) == {"fa3fp8", "block", "per-tensor+rotation", "per-tensor", "qk-floor"}
    assert errors["fa3fp8"] < errors["block"] <= errors["per-tensor"]
    assert errors["per-tensor+rotation"] < errors["per-tensor"]


def test_the_floor_keeps_q_and_ks_rounding_alone(accuracy, errors):
    causal = SHAPE[-1]
    v, ref, cu, packed = draw(0)
    rotated = accuracy.qk_floor(quantize_qkv_reference(*packed, cu, cu, 64, 128), v, causal)
    plain = accuracy.qk_floor(quantize_qkv_reference(*packed, cu, cu, 64, 128, hadamard=False), v, causal)
    assert rotated.shape == ref.shape
    assert 0 < rmse(rotated, ref) < rmse(plain, ref)
    assert 0 < errors["qk-floor"] < errors["fa3fp8"]


def test_plot_writes_a_png(accuracy, errors, tmp_path):
    rows = [dict(zip(accuracy.SHAPE_FIELDS, SHAPE), rmse=errors)]
    accuracy.plot(rows, tmp_path / "accuracy.png")
    assert (tmp_path / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert accuracy.shape_label(rows[0]) == "d128 causal GQA 2:1"
