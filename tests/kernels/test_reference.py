"""reference.py: the plain-PyTorch attention against F.scaled_dot_product_attention in float64, its causal
alignment, fully masked rows, LSE merging and the FP8 quantization bounds."""

import math

import pytest
import torch
import torch.nn.functional as F

from fa3fp8.fp8_layout import E4M3_MAX
from fa3fp8.reference import (
    attention_fp8_reference,
    attention_reference,
    attention_varlen_reference,
    dequantize,
    quantize_qkv_reference,
    quantize_reference,
)
from fa3fp8.hadamard import rotate
from fa3fp8.testing import case_id, random_qkv, rmse

SHAPES = [(2, 33, 33, 4, 2, 64, True), (1, 17, 50, 8, 8, 128, False), (2, 64, 64, 4, 1, 32, True)]


@pytest.mark.parametrize("shape", SHAPES, ids=[case_id(*s) for s in SHAPES])
def test_matches_sdpa_in_float64(shape):
    batch, sq, sk, heads, kv_heads, d, causal = shape
    q, k, v = random_qkv(*shape[:6], torch.float64, "cpu")
    out, _ = attention_reference(q, k, v, causal=causal, compute_dtype=torch.float64)
    group = heads // kv_heads
    expect = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(group, 1), v.transpose(1, 2).repeat_interleave(group, 1),
        is_causal=causal,
    ).transpose(1, 2)
    torch.testing.assert_close(out, expect, rtol=1e-10, atol=1e-10)


def test_causal_is_aligned_bottom_right():
    q, k, v = random_qkv(1, 3, 10, 2, 2, 64, torch.float64, "cpu")
    out, _ = attention_reference(q, k, v, causal=True, compute_dtype=torch.float64)
    # the last query sees every key, the first sees keys 0..7
    full, _ = attention_reference(q[:, 2:], k, v, causal=False, compute_dtype=torch.float64)
    first, _ = attention_reference(q[:, :1], k[:, :8], v[:, :8], causal=False, compute_dtype=torch.float64)
    torch.testing.assert_close(out[:, 2:], full)
    torch.testing.assert_close(out[:, :1], first)


WINDOWS = [((2, -1), True), ((4, 3), False), ((0, 0), False), ((-1, 2), False), ((5, 1), True)]


@pytest.mark.parametrize("window_size, causal", WINDOWS, ids=[f"{w[0]}_{w[1]}-{c}" for w, c in WINDOWS])
def test_window_matches_sdpa_with_its_mask_in_float64(window_size, causal):
    # query i stands at key i + sk - sq and sees keys [i + sk - sq - left, i + sk - sq + right], causal ones <= it
    q, k, v = random_qkv(1, 9, 14, 2, 2, 64, torch.float64, "cpu")
    out, _ = attention_reference(q, k, v, causal=causal, compute_dtype=torch.float64, window_size=window_size)
    at, cols = torch.arange(9)[:, None] + 5, torch.arange(14)[None, :]
    left, right = window_size
    mask = ((cols >= at - left) | (left < 0)) & ((cols <= at + right) | (right < 0)) & ((cols <= at) | (not causal))
    expect = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
    torch.testing.assert_close(out, expect.transpose(1, 2), rtol=1e-10, atol=1e-10)


def test_a_window_right_of_every_key_gives_zeros():
    q, k, v = random_qkv(1, 6, 4, 2, 2, 64, torch.float32, "cpu")
    out, lse = attention_reference(q, k, v, window_size=(0, 0))  # queries 0 and 1 stand before key 0
    assert torch.equal(out[:, :2], torch.zeros_like(out[:, :2]))
    assert torch.isinf(lse[:, :, :2]).all() and torch.isfinite(lse[:, :, 2:]).all()


def test_fully_masked_rows_give_zeros_and_minus_inf_lse():
    q, k, v = random_qkv(1, 6, 4, 2, 2, 64, torch.float32, "cpu")
    out, lse = attention_reference(q, k, v, causal=True)
    assert torch.equal(out[:, :2], torch.zeros_like(out[:, :2]))
    assert torch.isinf(lse[:, :, :2]).all() and torch.isfinite(lse[:, :, 2:]).all()


def test_lse_merges_partial_results():
    q, k, v = random_qkv(1, 20, 40, 2, 2, 64, torch.float64, "cpu")
    full, _ = attention_reference(q, k, v, compute_dtype=torch.float64)
    (o1, l1), (o2, l2) = (attention_reference(q, k[:, s], v[:, s], compute_dtype=torch.float64)
                          for s in (slice(0, 25), slice(25, 40)))
    lse = torch.logaddexp(l1, l2)
    w1, w2 = (torch.exp(x - lse).transpose(1, 2)[..., None] for x in (l1, l2))
    torch.testing.assert_close(w1 * o1 + w2 * o2, full)


def test_varlen_equals_per_sequence_dense():
    lens = [3, 11, 6]
    cu = torch.tensor([0, 3, 14, 20], dtype=torch.int32)
    q, k, v = (torch.randn(20, 4, 64, dtype=torch.float64) for _ in range(3))
    out, lse = attention_varlen_reference(q, k, v, cu, cu, causal=True, compute_dtype=torch.float64)
    for (t0, t1) in zip(cu[:-1].tolist(), cu[1:].tolist()):
        o, l = attention_reference(
            q[None, t0:t1], k[None, t0:t1], v[None, t0:t1], causal=True, compute_dtype=torch.float64
        )
        torch.testing.assert_close(out[t0:t1], o[0])
        torch.testing.assert_close(lse[:, t0:t1], l[0])
    assert sum(lens) == out.shape[0]


@pytest.mark.parametrize("hadamard", [False, True], ids=["plain", "hadamard"])
def test_quantization_error_within_half_an_e4m3_step(hadamard):
    cu = torch.tensor([0, 50, 130], dtype=torch.int32)
    x = torch.randn(130, 3, 64, dtype=torch.float32) * 5
    data, scale = quantize_reference(x, cu, 32, hadamard)
    deq = dequantize(data, scale, cu, 32)
    target = rotate(x) if hadamard else x.double()
    # e4m3: 3 mantissa bits (half step 2^-4 relative) for normals, steps of 2^-9 below 2^-6, in units of the scale
    s = _scale_per_row(scale, cu, 32)[:, :, None]
    bound = torch.maximum(target.abs() * 2**-4, s * 2**-10) * (1 + 1e-6)
    assert ((deq - target).abs() <= bound).all()
    # each tile's largest entry maps to e4m3's largest value
    assert data.float().abs().amax().item() == E4M3_MAX


def _scale_per_row(scale, cu, block):
    rows = []
    for b, (t0, t1) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        first = sum(math.ceil((cu[i + 1] - cu[i]).item() / block) for i in range(b))
        rows += [scale[:, first + (t - t0) // block] for t in range(t0, t1)]
    return torch.stack(rows).double()


def test_v_is_stored_transposed_tile_by_tile():
    cu = torch.tensor([0, 5, 40], dtype=torch.int32)
    v = torch.randn(40, 2, 64)
    data, scale = quantize_reference(v, cu, 32, hadamard=False, transpose=True)
    assert data.shape == (2, 64, (2 + 2) * 32)  # room for ceil(40 / 32) + batch tiles
    assert torch.equal(data[:, :, 5:32].float(), torch.zeros(2, 64, 27))  # tile tail of sequence 0 is zero
    deq = dequantize(data, scale, cu, 32, transposed=True)
    assert rmse(deq, v) < 0.05 * v.std().item()


def test_fp8_reference_tracks_exact_attention():
    # a statistical claim: fixed seed, enough entries for the outliers to matter
    q, k, v = random_qkv(1, 256, 256, 4, 4, 64, torch.float32, "cpu", seed=11, outliers=True)
    cu = torch.tensor([0, 256], dtype=torch.int32)
    packed = [x[0] for x in (q, k, v)]
    exact, _ = attention_reference(q, k, v, compute_dtype=torch.float64)
    ours = attention_fp8_reference(quantize_qkv_reference(*packed, cu, cu, 64, 64))[0]
    plain = attention_fp8_reference(quantize_qkv_reference(*packed, cu, cu, 64, 64, hadamard=False, per_tensor=True))[0]
    assert rmse(ours, exact[0]) < 0.03
    assert rmse(ours, exact[0]) < rmse(plain, exact[0])
