"""benchmarks/attention.py's kernels mode, the parts that run without a GPU: which shapes it times and which
kernels it sets beside each other (a wrong list wastes the lent GPU's minutes)."""

import argparse
import itertools

import pytest


def _args(**overrides):
    args = dict(dtypes=["bf16", "fp8"], dims=[64, 128, 256], seqlens=[4096, 16384], causal_only=False,
                full_only=False, prefill_shape=False, tokens=16384)
    return argparse.Namespace(**{**args, **overrides})


def test_cases_cover_the_cuda_head_dims_both_masks(bench):
    cases = bench.kernel_cases(_args())
    assert {(fp8, d, causal, seqlen) for fp8, d, causal, seqlen, *_ in cases} == {
        (fp8, d, causal, seqlen) for fp8 in (False, True) for d in (64, 128, 256) for causal in (False, True)
        for seqlen in (4096, 16384)
    }
    for _, d, _, seqlen, batch, heads, kv_heads in cases:
        assert batch * seqlen == 16384 and heads * d == 2048 and kv_heads == heads


@pytest.mark.parametrize("flag,causal", [("causal_only", True), ("full_only", False)])
def test_mask_flags_keep_one_mask(bench, flag, causal):
    cases = bench.kernel_cases(_args(**{flag: True}))
    assert cases and all(c[2] is causal for c in cases)


def test_tokens_set_the_batch_of_each_length(bench):
    cases = bench.kernel_cases(_args(tokens=32768, seqlens=[4096, 16384, 65536]))
    assert {(seqlen, batch) for _, _, _, seqlen, batch, *_ in cases} == {(4096, 8), (16384, 2), (65536, 1)}


def test_prefill_shape_is_one_causal_fp8_case_after_the_others(bench):
    cases = bench.kernel_cases(_args(prefill_shape=True))
    assert cases[-1] == (True, 128, True, 131072, 1, 32, 8)
    assert cases[:-1] == bench.kernel_cases(_args())
    assert bench.kernel_cases(_args(dtypes=["bf16"], seqlens=[], prefill_shape=True)) == []  # it is an FP8 case


def test_every_named_kernel_is_a_launcher_setting(bench):
    # the rows' names: one CTA unless a name says pairs, one CTA per causal work tile unless it says fold (causal
    # only), a persistent launch's last round split along the keys unless it says nosplit (no causal mask, or folds)
    for (name, fp8), extra in bench.KERNELS.items():
        if extra is None:
            assert name == "triton"
            continue
        assert ("pairs" in name) == (extra.get("cluster", 1) == 2), name
        assert ("fold" in name) == extra.get("fold", False), name
        assert ("nosplit" in name) == (not extra.get("split", True)), name
        if "nosplit" in name:  # only persistent launches split their last round
            assert name in bench.FULL_ONLY or "fold" in name, name
        if "fold" in name:  # causal only
            assert name in bench.CAUSAL_ONLY, name
    assert bench.D128_ONLY | bench.D256_ONLY | bench.D64 <= set(bench.KERNELS)
    names = {name for name, _ in bench.KERNELS}
    for subset in (bench.FULL_ONLY, bench.CAUSAL_ONLY):
        assert set(subset) <= names
    assert not set(bench.FULL_ONLY) & set(bench.CAUSAL_ONLY)


def test_kernels_at_d64_are_the_ones_built_there(bench):
    # d64: 128-key tiles on one CTA, two or three consumers in either loop, causal folds overlapped, and nothing d128's
    # or d256's alone
    for fp8, causal in itertools.product((False, True), (False, True)):
        folds = {"cuda-overlap-fold", "cuda-overlap-3wg-fold"} if causal else set()
        assert set(bench.kernel_names(fp8, 64, causal)) == {
            "triton", "cuda-overlap", "cuda-serial", "cuda-serial-3wg", "cuda-overlap-3wg", *folds}
        assert not {"cuda-overlap-3wg", "cuda-overlap-3wg-fold"} & set(bench.kernel_names(fp8, 128, causal))
        assert not {"cuda-serial-3wg", "cuda-overlap-3wg"} & set(bench.kernel_names(fp8, 256, causal))
    assert "cuda-serial-3wg" not in bench.kernel_names(False, 128, False)  # 16-bit d128's is cuda-serial-3wg-128
    assert bench.kernel_names(False, 64, False, impls=["cuda-serial-3wg"]) == ["triton", "cuda-serial-3wg"]
