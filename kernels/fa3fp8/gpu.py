"""Facts about the GPU a launch runs on."""

import functools

import torch


@functools.cache
def sm_count(device: torch.device | str) -> int:
    """Streaming multiprocessors of a CUDA device: the launchers size persistent grids and splits by it."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def is_hopper(capability: tuple[int, int]) -> bool:
    """True for a CUDA compute capability whose SMs run fa3fp8's kernels: Hopper's (9.x: H100, H200). Elsewhere the
    PyTorch reference serves."""
    return capability[0] == 9
