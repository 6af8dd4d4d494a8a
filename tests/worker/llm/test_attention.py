"""fa3fp8 as transformers attention: logits agree with sdpa (one pass, chunked prefill, packed, decode; with a
sliding window too); FP8 prefill reads only the cache it is given; what fa3 does not compute is refused."""
import pytest
import structlog
import torch
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    GptOssConfig,
    GptOssForCausalLM,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
)

from worker.llm.attention import fa3_unsupported, quantized_prefill, set_decode_attention, window_size
from worker.llm.packing import packed_outputs
from worker.llm.random_checkpoint import TINY_LLAMA_SHAPE, llama_config
from worker.llm.runtime import runtime_for
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


SLIDING_WINDOW = 24  # tokens a query sees, itself included: far fewer than the ~200 of the text
DECODE_LOGIT_TOLERANCE = 0.1  # bf16 logits of the tiny model: paths differ by ~0.03


@pytest.fixture(scope="module")
def mistral_runtimes(load_tiny):
    """A tiny random Mistral with a sliding window (the tiny Llama's shape and tokenizer), under each
    implementation; (runtimes by implementation, the same model without its window under sdpa)."""
    tokenizer = load_tiny().tokenizer

    def model(window):
        torch.manual_seed(0)
        config = MistralConfig(vocab_size=len(tokenizer), sliding_window=window, tie_word_embeddings=False,
                               **TINY_LLAMA_SHAPE)
        return MistralForCausalLM(config).to(torch.bfloat16)

    runtimes = {impl: runtime_for(model(SLIDING_WINDOW), tokenizer, attention_impl=impl, prefill_chunk_tokens=48,
                                  pack_token_budget=4096)
                for impl in ("sdpa", *IMPLEMENTATIONS)}
    return runtimes, runtime_for(model(None), tokenizer, attention_impl="sdpa")


def test_the_sliding_window_moves_the_logits(mistral_runtimes, text_ids):
    """Without it the comparisons below would prove nothing: attention over the whole text gives other logits."""
    runtimes, unwindowed = mistral_runtimes
    windowed = logprobs(runtimes["sdpa"], text_ids)
    assert (windowed - logprobs(unwindowed, text_ids)).abs().mean() > 2 * TOLERANCE["fa3_fp8"][1]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_sliding_window_logits_agree_with_sdpa(mistral_runtimes, text_ids, impl):
    # chunked prefill of 48-token chunks, then packed sequences longer than the window
    runtimes, _ = mistral_runtimes
    actual, expected = logprobs(runtimes[impl], text_ids), logprobs(runtimes["sdpa"], text_ids)
    assert (actual - expected).abs().max() < TOLERANCE[impl][0]
    assert (actual - expected).abs().mean() < TOLERANCE[impl][1]
    sequences = [text_ids[:40], text_ids[40:130], text_ids[3:20]]
    packed = packed_outputs(runtimes[impl], sequences, "logprobs")
    for got, want in zip(packed, packed_outputs(runtimes["sdpa"], sequences, "logprobs")):
        assert (got.values - want.values).abs().max() < TOLERANCE[impl][0]


def test_a_windowed_layers_fp8_mirror_keeps_v_in_its_windows_order(mistral_runtimes, text_ids, monkeypatch):
    # as on a Hopper GPU, where full FP8 attention runs the CUDA kernel (V key-permuted) but windows the Triton one
    # (V in order): the mirror takes the window's order, so that no chunk reads it through a reordered copy
    monkeypatch.setattr("fa3fp8.ops._cuda_serves_fp8", lambda t, block_m, block_n: True)
    runtimes, _ = mistral_runtimes
    session = Session(runtimes["fa3_fp8"])
    actual = session.prefill(text_ids, token_logprobs=True)
    assert [layer.quantized.v_permuted for layer in session.cache.layers] == [False] * len(session.cache.layers)
    assert (actual - logprobs(runtimes["sdpa"], text_ids)).abs().mean() < TOLERANCE["fa3_fp8"][1]


@pytest.mark.parametrize("decode", ["split", "kernel", "sdpa", "matmul"])
def test_sliding_window_decode_paths_agree(mistral_runtimes, text_ids, decode, monkeypatch):
    # a decode step's logits against one sdpa pass over the same tokens (greedy tokens of a random model flip on
    # near-ties, so they are not compared); the window moves them by far more than the tolerance
    runtimes, unwindowed = mistral_runtimes
    monkeypatch.setattr("worker.llm.attention._decode_attention", decode)
    session = Session(runtimes["fa3_bf16"])
    session.prefill(text_ids[:100])
    tokens = torch.tensor([[*text_ids[:100], *session.generate(1)]])
    with torch.no_grad():
        one_pass = runtimes["sdpa"].model(input_ids=tokens).logits[0, -1].float()
        without_window = unwindowed.model(input_ids=tokens).logits[0, -1].float()
    assert (session.next_logits - one_pass).abs().max() < DECODE_LOGIT_TOLERANCE
    assert (without_window - one_pass).abs().max() > 4 * DECODE_LOGIT_TOLERANCE


def test_window_size_follows_transformers_flash_attention():
    assert window_size(None) == (-1, -1)
    assert window_size(4096) == (4095, 4095)
    with pytest.raises(ValueError, match="sliding_window must be a positive int"):
        window_size(0)


def test_models_with_soft_capping_take_their_own_attention(load_tiny):
    # Gemma 2 caps its attention logits (attn_logit_softcapping), which fa3fp8 does not compute, nor sdpa in
    # transformers: it runs eager
    torch.manual_seed(0)
    shape = {key: value for key, value in TINY_LLAMA_SHAPE.items() if key != "initializer_range"}
    model = Gemma2ForCausalLM(Gemma2Config(vocab_size=len(load_tiny().tokenizer), **shape))
    assert fa3_unsupported(model) == ["logit soft-capping (attn_logit_softcapping)"]
    with structlog.testing.capture_logs() as logs:
        runtime = runtime_for(model, load_tiny().tokenizer, attention_impl="fa3_bf16")
    assert runtime.attention_impl == "eager" and model.config._attn_implementation == "eager"
    [logged] = [entry for entry in logs if entry["event"] == "attention_impl_unavailable"]
    assert logged["configured"] == "fa3_bf16" and "soft-capping" in logged["reason"]
    assert fa3_unsupported(load_tiny().model) == []


def test_layers_of_other_masked_kinds_are_found():
    # Llama 4's chunked attention reaches attention only as a mask, which the fa3 mask hook drops; layers that do not
    # call attention (a hybrid model's linear attention) and sliding windows are fine
    model = LlamaForCausalLM(llama_config(vocab_size=100, **TINY_LLAMA_SHAPE))
    model.config.layer_types = ["chunked_attention", "full_attention"]
    assert fa3_unsupported(model) == ["chunked_attention layers"]
    model.config.layer_types = ["linear_attention", "sliding_attention", "full_attention"]
    assert fa3_unsupported(model) == []


def test_models_with_attention_sinks_are_found():
    config = GptOssConfig(vocab_size=100, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_local_experts=2,
                          num_experts_per_tok=1)
    assert fa3_unsupported(GptOssForCausalLM(config)) == ["attention sinks"]


def test_soft_capping_and_sinks_are_refused(load_tiny, text_ids):
    from worker.llm.attention import fa3_bf16_attention

    q = torch.randn(1, 4, 8, 64, dtype=torch.bfloat16)
    kv = torch.randn(1, 2, 8, 64, dtype=torch.bfloat16)
    module = load_tiny("fa3_bf16").model.model.layers[0].self_attn
    with pytest.raises(ValueError, match="softcap"):
        fa3_bf16_attention(module, q, kv, kv, None, softcap=50.0)
    with pytest.raises(ValueError, match="s_aux"):
        fa3_bf16_attention(module, q, kv, kv, None, s_aux=torch.zeros(4))
