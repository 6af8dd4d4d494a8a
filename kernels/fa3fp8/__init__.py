"""fa3fp8: FlashAttention-3-style attention kernels (BF16 and FP8) for Hopper."""
