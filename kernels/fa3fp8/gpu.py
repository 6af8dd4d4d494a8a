"""Facts about the GPU a launch runs on."""

import functools

import torch


@functools.cache
def sm_count(device: torch.device | str) -> int:
    """Streaming multiprocessors of a CUDA device: the launchers size persistent grids and splits by it."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def current_stream(device: torch.device) -> int:
    """The handle of the current CUDA stream on a device, as the kernel library's launches take it: torch's raw query,
    the one Triton's launcher makes (0.1 us of host time a call on the H100 machine, where building
    torch.cuda.current_stream's Stream object took 3.8)."""
    return torch._C._cuda_getCurrentRawStream(device.index)


def is_hopper(capability: tuple[int, int]) -> bool:
    """True for a CUDA compute capability whose SMs run fa3fp8's kernels: Hopper's (9.x: H100, H200). Elsewhere the
    PyTorch reference serves."""
    return capability[0] == 9
