"""Facts about the GPU a launch runs on."""

import functools

import torch


@functools.cache
def sm_count(device: torch.device | str) -> int:
    """Streaming multiprocessors of a CUDA device: the launchers size persistent grids and splits by it."""
    return torch.cuda.get_device_properties(device).multi_processor_count
