"""fa3fp8.gpu: the device facts the launchers size their grids by."""

import pytest
import torch

from fa3fp8.gpu import current_stream, is_hopper, sm_count


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sm_count_is_the_device_property_and_looked_up_once():
    sm_count.cache_clear()
    expected = torch.cuda.get_device_properties(0).multi_processor_count
    assert sm_count(torch.device("cuda", 0)) == expected > 0
    assert sm_count(torch.device("cuda", 0)) == expected
    assert sm_count.cache_info().hits == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_current_stream_is_the_handle_of_torchs_current_stream():
    device = torch.device("cuda", 0)
    assert current_stream(device) == torch.cuda.current_stream(device).cuda_stream
    side = torch.cuda.Stream(device)
    with torch.cuda.stream(side):
        assert current_stream(device) == side.cuda_stream != torch.cuda.default_stream(device).cuda_stream


@pytest.mark.parametrize("capability,hopper", [((9, 0), True), ((8, 0), False), ((8, 9), False), ((10, 0), False)])
def test_the_kernels_run_on_hopper_only(capability, hopper):
    assert is_hopper(capability) == hopper
