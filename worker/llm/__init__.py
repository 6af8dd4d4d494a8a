"""Long-context causal LM runtime for the worker: loading, fa3fp8 attention, chunked prefill, packing, decoding."""
