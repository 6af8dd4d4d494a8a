"""The preallocated KV cache: same logits as DynamicCache (under fa3_fp8 through its FP8 mirror, as quantizing the
whole cache for every chunk gave them), states returned as views of its buffers, growth, crop."""
import pytest
import torch
from transformers import DynamicCache, LlamaConfig

from worker.llm.kv_cache import PreallocatedCache, PreallocatedLayer, new_cache
from worker.llm.session import Session


def states(tokens, batch=1, heads=2, dim=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, heads, tokens, dim, generator=generator),
            torch.randn(batch, heads, tokens, dim, generator=generator))


def shares_storage(view, buffer):
    return view.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()


def stream_outputs(session, ids):
    """Chunked prefill with log-probs, greedy decoding, a rollback, other tokens prefilled and rolled back, and the
    continuation. Past 128 tokens: FP8 K/V blocks fill, and the rollbacks land inside them."""
    first = session.prefill(ids[:150], token_logprobs=True)
    mark = session.checkpoint()
    generated = session.generate(5)
    decoded_logits = session.next_logits
    session.rollback(mark)
    session.prefill(ids[::-1][:130])
    session.rollback(mark)
    again = session.prefill(ids[150:300], token_logprobs=True)
    return first, generated, decoded_logits, again, session.next_logits


@pytest.mark.parametrize("impl", ["sdpa", "fa3_bf16", "fa3_fp8"])
def test_session_outputs_equal_dynamic_cache(load_tiny, text_ids, impl):
    runtime = load_tiny(impl, prefill_chunk_tokens=7)
    session = Session(runtime)
    assert isinstance(session.cache, PreallocatedCache)
    reference = Session(runtime)
    reference.cache = DynamicCache(config=runtime.model.config)
    ids = text_ids + text_ids
    for got, want in zip(stream_outputs(session, ids), stream_outputs(reference, ids)):
        if isinstance(want, list):
            assert got == want
        else:
            torch.testing.assert_close(got, want, atol=0, rtol=0)
    assert session.cache.get_seq_length() == reference.cache.get_seq_length() == 300


def test_session_cache_layers_hold_views_of_their_buffers(load_tiny, text_ids):
    session = Session(load_tiny(prefill_chunk_tokens=16))
    session.prefill(text_ids[:40])
    for layer in session.cache.layers:
        assert layer.keys.shape == (1, 2, 40, 64)
        assert shares_storage(layer.keys, layer.key_buffer) and shares_storage(layer.values, layer.value_buffer)


def test_update_returns_views_of_the_buffers_in_transformers_shape():
    layer = PreallocatedLayer(capacity=32)
    key_a, value_a = states(5)
    key_b, value_b = states(3, seed=1)
    layer.update(key_a, value_a)
    keys, values = layer.update(key_b, value_b)
    assert keys.shape == values.shape == (1, 2, 8, 4)
    torch.testing.assert_close(keys, torch.cat([key_a, key_b], dim=2), rtol=0, atol=0)
    torch.testing.assert_close(values, torch.cat([value_a, value_b], dim=2), rtol=0, atol=0)
    assert shares_storage(keys, layer.key_buffer) and shares_storage(values, layer.value_buffer)


def test_kernel_layout_is_a_contiguous_view_for_batch_one():
    """fa3fp8 gets key.transpose(1, 2) and reshapes it to (tokens, kv_heads, d): both must stay views, so the
    kernels' `.contiguous()` copies nothing."""
    layer = PreallocatedLayer(capacity=32)
    keys, _ = layer.update(*states(6))
    kernel_keys = keys.transpose(1, 2)
    assert kernel_keys.is_contiguous()
    assert kernel_keys.reshape(6, 2, 4).data_ptr() == layer.key_buffer.data_ptr()


def test_buffers_grow_by_doubling_up_to_the_capacity_and_keep_their_contents():
    layer = PreallocatedLayer(capacity=10)
    key_a, value_a = states(3)
    layer.update(key_a, value_a)
    assert layer.allocated == 3
    key_b, value_b = states(1, seed=1)
    layer.update(key_b, value_b)
    assert layer.allocated == 6
    key_c, value_c = states(5, seed=2)
    keys, values = layer.update(key_c, value_c)
    assert layer.allocated == 10
    torch.testing.assert_close(keys, torch.cat([key_a, key_b, key_c], dim=2), rtol=0, atol=0)
    torch.testing.assert_close(values, torch.cat([value_a, value_b, value_c], dim=2), rtol=0, atol=0)


def test_overflowing_the_capacity_is_refused_and_leaves_the_layer_as_it_was():
    layer = PreallocatedLayer(capacity=8)
    layer.update(*states(7))
    with pytest.raises(ValueError, match="key_states: 2 more tokens would make 9, past the cache's capacity of 8"):
        layer.update(*states(2))
    assert layer.get_seq_length() == 7 and layer.keys.shape[2] == 7
    empty = PreallocatedLayer(capacity=4)
    with pytest.raises(ValueError, match="capacity of 4"):
        empty.update(*states(5))
    assert not empty.is_initialized and empty.allocated == 0


def test_crop_drops_the_last_tokens_and_the_next_update_overwrites_them():
    layer = PreallocatedLayer(capacity=16)
    key_a, value_a = states(6)
    layer.update(key_a, value_a)
    layer.crop(-2)
    assert layer.get_seq_length() == 4 and layer.keys.shape[2] == 4
    key_b, value_b = states(3, seed=1)
    keys, values = layer.update(key_b, value_b)
    torch.testing.assert_close(keys, torch.cat([key_a[:, :, :4], key_b], dim=2), rtol=0, atol=0)
    torch.testing.assert_close(values, torch.cat([value_a[:, :, :4], value_b], dim=2), rtol=0, atol=0)
    for bad in (1, -8):
        with pytest.raises(ValueError, match="tokens_to_remove"):
            layer.crop(bad)
    layer.crop(0)
    assert layer.get_seq_length() == 7
    PreallocatedLayer(capacity=4).crop(0)


def test_cache_answers_the_length_and_mask_questions_transformers_asks():
    cache = PreallocatedCache(num_layers=2, capacity=20)
    assert cache.get_seq_length() == 0 and cache.get_mask_sizes(5, 0) == (5, 0)
    for layer_idx in range(2):
        cache.update(*states(5), layer_idx)
    assert cache.get_seq_length() == 5 and cache.get_mask_sizes(1, 1) == (6, 0)
    assert cache.get_max_length() == 20 and cache.is_croppable and not cache.is_compileable
    assert cache.is_sliding == [False, False]
    cache.crop(-3)
    assert [layer.get_seq_length() for layer in cache.layers] == [2, 2]
    cache.reset()
    assert cache.get_seq_length() == 0


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="capacity"):
        PreallocatedLayer(capacity=0)
    with pytest.raises(ValueError, match="num_layers"):
        PreallocatedCache(num_layers=0, capacity=8)


def test_models_with_other_layer_types_get_a_dynamic_cache():
    config = LlamaConfig(num_hidden_layers=2)
    assert isinstance(new_cache(config, 64), PreallocatedCache) and len(new_cache(config, 64).layers) == 2
    config.layer_types = ["full_attention", "sliding_attention"]
    config.sliding_window = 16
    assert type(new_cache(config, 64)) is DynamicCache


def test_split_decode_reads_the_cache_buffers_in_place(load_tiny, text_ids, monkeypatch):
    import fa3fp8

    session = Session(load_tiny("fa3_bf16"))
    session.prefill(text_ids[:30])
    calls = []
    decode = fa3fp8.flash_attn_decode_func

    def recording_decode(q, k_cache, v_cache, **kwargs):
        calls.append((q.shape, k_cache, v_cache))
        return decode(q, k_cache, v_cache, **kwargs)

    monkeypatch.setattr(fa3fp8, "flash_attn_decode_func", recording_decode)
    monkeypatch.setattr("worker.llm.attention._decode_attention", "split")
    session.generate(1)
    assert len(calls) == len(session.cache.layers)
    for (q_shape, k_cache, v_cache), layer in zip(calls, session.cache.layers):
        assert q_shape == (1, 4, 64) and k_cache.shape == v_cache.shape == (1, 31, 2, 64)
        assert k_cache.data_ptr() == layer.key_buffer.data_ptr() and k_cache.is_contiguous()
        assert v_cache.data_ptr() == layer.value_buffer.data_ptr()


def test_static_mode_writes_at_the_device_position_and_returns_the_reserved_buffers():
    layer = PreallocatedLayer(capacity=16)
    key, value = states(5)
    layer.update(key, value)
    layer.reserve(8)
    position = torch.tensor([5])
    new_key, new_value = states(1, seed=1)
    layer.static_position = position
    keys, values = layer.update(new_key, new_value)
    layer.static_position = None
    assert keys.shape == (1, 2, 8, 4) and shares_storage(keys, layer.key_buffer)
    assert torch.equal(keys[:, :, 5], new_key[:, :, 0]) and torch.equal(values[:, :, 5], new_value[:, :, 0])
    assert torch.equal(keys[:, :, :5], key)
    assert layer.length == 5  # static updates leave the length to `advance`
    layer.advance(1)
    assert torch.equal(layer.keys, torch.cat([key, new_key], dim=2))


def test_reserve_and_advance_stay_within_bounds():
    layer = PreallocatedLayer(capacity=6)
    with pytest.raises(ValueError, match="prefill first"):
        layer.reserve(4)
    layer.update(*states(2))
    layer.reserve(100)
    assert layer.allocated == 6  # capped at the capacity
    with pytest.raises(ValueError, match="tokens"):
        layer.advance(5)


def test_cache_static_context_sets_and_clears_every_layer():
    cache = PreallocatedCache(num_layers=3, capacity=8)
    position = torch.tensor([0])
    with cache.static(position):
        assert all(layer.static_position is position for layer in cache.layers)
    assert all(layer.static_position is None for layer in cache.layers)
