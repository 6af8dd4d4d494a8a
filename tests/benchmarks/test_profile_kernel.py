"""benchmarks/profile_kernel.py, the part that runs without a GPU: which implementations it takes at each dtype."""

import pytest


def test_takes_the_defaults_the_kernels_modes_names_and_the_peers_of_each_dtype(profile, bench):
    for fp8 in (False, True):
        profile.check_impl("default", fp8)
        for name, kernel_fp8 in bench.KERNELS:
            if kernel_fp8 == fp8:
                profile.check_impl(name, fp8)
    profile.check_impl("sdpa-cudnn", False)
    profile.check_impl("sdpa-flash", False)
    profile.check_impl("cudnn-fp8", True)


@pytest.mark.parametrize("impl,fp8", [("cudnn-fp8", False), ("sdpa-cudnn", True), ("sdpa-flash", True),
                                      ("cuda-serial-256", False), ("no-such-kernel", False)])
def test_refuses_an_impl_the_dtype_has_not_naming_it(profile, impl, fp8):
    with pytest.raises(ValueError, match=f"impl: '{impl}'"):
        profile.check_impl(impl, fp8)
