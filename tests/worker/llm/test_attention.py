"""fa3fp8 as transformers attention: logits agree with sdpa (one pass, chunked prefill, packed, decode); FP8
prefill reads only the cache it is given."""
import pytest
import torch

from worker.llm.attention import quantized_prefill, set_decode_attention
from worker.llm.packing import packed_outputs
from worker.llm.session import Session

IMPLEMENTATIONS = ["fa3_bf16", "fa3_fp8"]
# (max, mean) log-prob differences to sdpa. FP8 Q/K/V (e4m3: 3 mantissa bits) moves them more than BF16.
TOLERANCE = {"fa3_bf16": (0.05, 0.01), "fa3_fp8": (0.3, 0.06)}


def logprobs(runtime, ids):
    return Session(runtime).prefill(ids, token_logprobs=True)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("chunk", [4096, 48], ids=["one-pass", "chunked"])
def test_prefill_logits_agree_with_sdpa(load_tiny, text_ids, impl, chunk):
    expected = logprobs(load_tiny("sdpa", prefill_chunk_tokens=chunk), text_ids)
    actual = logprobs(load_tiny(impl, prefill_chunk_tokens=chunk), text_ids)
    assert (actual - expected).abs().max() < TOLERANCE[impl][0]
    assert (actual - expected).abs().mean() < TOLERANCE[impl][1]


def test_attention_moves_the_logits_beyond_the_tolerances(load_tiny, text_ids):
    """A wrong attention (other context) must fail the comparisons above, or they would prove nothing."""
    runtime = load_tiny("sdpa")
    session = Session(runtime)
    session.prefill(text_ids[:50])
    in_context = session.prefill(text_ids[50:], token_logprobs=True)
    session = Session(runtime)
    session.prefill(text_ids[:50][::-1])
    other_context = session.prefill(text_ids[50:], token_logprobs=True)
    assert (in_context - other_context).abs().mean() > 2 * TOLERANCE["fa3_fp8"][1]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_packed_logits_agree_with_sdpa(load_tiny, text_ids, impl):
    sequences = [text_ids[:40], text_ids[40:130], text_ids[3:20]]
    expected = packed_outputs(load_tiny("sdpa", pack_token_budget=4096), sequences, "logprobs")
    actual = packed_outputs(load_tiny(impl, pack_token_budget=4096), sequences, "logprobs")
    for got, want in zip(actual, expected):
        assert (got.values - want.values).abs().max() < TOLERANCE[impl][0]


@pytest.mark.parametrize("decode", ["split", "kernel", "sdpa", "matmul"])
def test_decode_paths_agree(load_tiny, text_ids, decode, monkeypatch):
    expected = Session(load_tiny("sdpa"))
    expected.prefill(text_ids[:100])
    reference = expected.generate(5)
    monkeypatch.setattr("worker.llm.attention._decode_attention", decode)
    session = Session(load_tiny("fa3_bf16"))
    session.prefill(text_ids[:100])
    assert session.generate(5) == reference


def test_decode_attention_choice_is_checked():
    with pytest.raises(ValueError, match="decode_attention"):
        set_decode_attention("fast")


def test_padding_masks_are_refused(load_tiny, text_ids):
    runtime = load_tiny("fa3_bf16")
    ids = torch.tensor([text_ids[:10]])
    with pytest.raises(ValueError, match="no attention_mask"):
        runtime.model(input_ids=ids, attention_mask=torch.ones(1, 10, dtype=torch.long).tril()[:1])


def test_fp8_prefill_refuses_a_quantized_cache_the_forward_does_not_update(load_tiny, text_ids):
    runtime = load_tiny("fa3_fp8")
    other, session = Session(runtime), Session(runtime)
    other.prefill(text_ids[:20])
    session.prefill(text_ids[:20])
    refused = pytest.raises(ValueError, match="key is not the cached keys of layer 0 of the quantized_prefill cache")
    with quantized_prefill(other.cache), refused:
        runtime.model(input_ids=torch.tensor([text_ids[20:30]]), position_ids=torch.arange(20, 30)[None],
                      use_cache=True, **{runtime.cache_kwarg: session.cache})
