"""fa3fp8.gpu: the device facts the launchers size their grids by."""

import pytest
import torch

from fa3fp8.gpu import sm_count


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sm_count_is_the_device_property_and_looked_up_once():
    sm_count.cache_clear()
    expected = torch.cuda.get_device_properties(0).multi_processor_count
    assert sm_count(torch.device("cuda", 0)) == expected > 0
    assert sm_count(torch.device("cuda", 0)) == expected
    assert sm_count.cache_info().hits == 1
