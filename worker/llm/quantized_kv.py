"""The FP8 mirror of a KV cache layer: its keys and values kept quantized too, for chunked prefill under `fa3_fp8`.

FP8 attention reads K and V quantized per (kv head, block of `block_n` keys), each block on its own
(`fa3fp8.quantize_kv`). Handed the whole cache, `flash_attn_func(fp8=True)` quantizes all of it again for every
chunk and layer: O(n² / chunk) work over a document, about 0.5 s of a 9.5 s prefill of 128K tokens on an H200. The
mirror keeps the complete blocks and, on each chunk, quantizes only from the first incomplete block to the end (the
trailing partial block is quantized again by the next chunk); as blocks are independent, what it holds equals
`quantize_kv` of the whole K/V bit for bit.

It costs 1 byte per K and V element plus one fp32 scale for K and one for V per (kv head, block): at 128K tokens of a
Llama-3.1-8B shape, 32 layers x 8 kv heads x 128 x 2 x 131072 = 8.6 GB, next to the 17 GB of the bf16 cache. Its
buffers grow by doubling up to the capacity, like the cache's, and only layers that served FP8 prefill chunks after
cached keys have one (a one-pass prefill makes none).
"""
import torch


def _offsets(count: int, device: torch.device) -> torch.Tensor:
    """int32 [0, count], made on the device (a copy from the host would wait for the GPU)."""
    return torch.arange(2, dtype=torch.int32, device=device) * count


class QuantizedKVMirror:
    """The first `length` keys and values of one sequence in FP8, as `fa3fp8.quantize_kv` gives them, in buffers of
    `allocated_blocks` blocks of `block_n` keys that grow by doubling up to `capacity` keys.

    V's key order (`v_permuted`) is chosen by the first quantization and kept by every later one.
    """

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.length = 0
        self.block_n = 0
        self.v_permuted: bool | None = None
        self.k8: torch.Tensor | None = None
        self.v8t: torch.Tensor | None = None
        self.k_scale: torch.Tensor | None = None
        self.v_scale: torch.Tensor | None = None

    @property
    def allocated_blocks(self) -> int:
        """Blocks of keys the buffers hold room for now."""
        return self.k_scale.shape[1] if self.k_scale is not None else 0

    def _make_room(self, part, blocks: int, start: int) -> None:
        """Buffers for at least `blocks` blocks shaped like `part`'s, keeping the keys before `start`."""
        if blocks <= self.allocated_blocks:
            return
        block_n = part.block_n
        size = min(-(-self.capacity // block_n), max(blocks, 2 * self.allocated_blocks))
        kv_heads, dim = part.k8.shape[1:]
        k8 = part.k8.new_empty((size * block_n, kv_heads, dim))
        v8t = part.v8t.new_empty((kv_heads, dim, size * block_n))
        k_scale = part.k_scale.new_empty((kv_heads, size))
        v_scale = part.v_scale.new_empty((kv_heads, size))
        if start:
            kept = start // block_n
            k8[:start] = self.k8[:start]
            v8t[..., :start] = self.v8t[..., :start]
            k_scale[:, :kept] = self.k_scale[:, :kept]
            v_scale[:, :kept] = self.v_scale[:, :kept]
        self.k8, self.v8t, self.k_scale, self.v_scale = k8, v8t, k_scale, v_scale

    def update(self, keys: torch.Tensor, values: torch.Tensor, v_permuted: bool | None = None):
        """The `fa3fp8.QuantizedKV` of `keys` and `values` (tokens, kv_heads, d): a sequence whose first `length`
        keys and values are those of the last update. Only the blocks from the one holding key `length` on are
        quantized; the bundle's V and scales are the whole buffers (tiles past the last one are unused).
        `v_permuted`: V's key order for the first quantization (None: quantize_kv's choice); later ones keep it."""
        import fa3fp8

        tokens = keys.shape[0]
        if tokens < self.length:
            raise ValueError(f"keys: {tokens} keys, fewer than the {self.length} quantized (truncate first)")
        if tokens > self.capacity:
            raise ValueError(f"keys: {tokens} keys, past the mirror's capacity of {self.capacity}")
        start = self.length - self.length % self.block_n if self.length else 0
        order = self.v_permuted if self.v_permuted is not None else v_permuted
        part = fa3fp8.quantize_kv(keys[None, start:], values[None, start:], permute_v=order)
        block_n = part.block_n
        blocks = -(-tokens // block_n)
        self._make_room(part, blocks, start)
        first, new = start // block_n, blocks - start // block_n
        self.k8[start:tokens] = part.k8
        self.v8t[..., start : blocks * block_n] = part.v8t[..., : new * block_n]
        self.k_scale[:, first:blocks] = part.k_scale[:, :new]
        self.v_scale[:, first:blocks] = part.v_scale[:, :new]
        self.length, self.block_n, self.v_permuted = tokens, block_n, part.v_permuted
        return fa3fp8.QuantizedKV(
            self.k8[:tokens], self.v8t, self.k_scale, self.v_scale, _offsets(tokens, keys.device),
            _offsets(blocks, keys.device), tokens, block_n, part.hadamard, part.v_permuted,
        )

    def truncate(self, length: int) -> None:
        """Forget keys from `length` on (the cache dropped them; what comes there next is quantized anew)."""
        self.length = min(self.length, length)
