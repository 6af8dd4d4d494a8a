"""benchmarks/profile_kernel.py, the part that runs without a GPU: which implementations it takes at each dtype, head
dim and mask."""

import itertools

import pytest


def test_takes_the_defaults_the_kernels_modes_names_and_the_peers_of_each_dtype(profile, bench):
    for fp8, d, causal in itertools.product((False, True), (128, 256), (False, True)):
        profile.check_impl("default", fp8, d, causal)
        for name in bench.kernel_names(fp8, d, causal):
            profile.check_impl(name, fp8, d, causal)
    for fp8, causal in itertools.product((False, True), (False, True)):
        profile.check_impl("cuda-overlap-3wg", fp8, 64, causal)
        profile.check_impl("sdpa-cudnn", False, 64, causal)
        profile.check_impl("sdpa-flash", False, 128, causal)
        profile.check_impl("cudnn-fp8", True, 256, causal)


@pytest.mark.parametrize("impl,fp8,d,causal", [
    ("cudnn-fp8", False, 128, False), ("sdpa-cudnn", True, 128, False), ("sdpa-flash", True, 128, False),
    ("cuda-serial-256", False, 128, False), ("no-such-kernel", False, 128, False),
    ("cuda-overlap-fold", False, 256, False),  # folds are causal
    ("cuda-overlap-128", False, 256, False),  # 128-key 16-bit tiles: d128's
    ("cuda-overlap-pairs", False, 64, False),  # d64 builds no pairs
])
def test_refuses_an_impl_the_dtype_head_dim_and_mask_have_not_naming_it(profile, impl, fp8, d, causal):
    with pytest.raises(ValueError, match=f"impl: '{impl}'"):
        profile.check_impl(impl, fp8, d, causal)
