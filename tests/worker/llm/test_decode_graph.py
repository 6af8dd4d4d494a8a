"""Static decode steps (the CUDA-graph path, run eagerly on the CPU; captured and replayed on a GPU) against the
session's ordinary decoding."""
import pytest
import torch

from worker.llm.attention import set_decode_attention
from worker.llm.decode_graph import StaticDecoder, supports_static_decode
from worker.llm.session import Session

STEPS = 12


def ordinary_decode(runtime, ids, steps):
    session = Session(runtime)
    session.prefill(ids)
    tokens, logits = [], []
    for _ in range(steps):
        tokens.append(int(session.next_logits.argmax()))
        logits.append(session._forward(torch.tensor(tokens[-1:], device=runtime.device), logits_to_keep=1)[-1].float())
        session.next_logits = logits[-1]
    return tokens, torch.stack(logits), session


def static_decode(runtime, ids, steps, graph):
    session = Session(runtime)
    session.prefill(ids)
    decoder = StaticDecoder(runtime, session.cache, session.length, steps, graph=graph)
    tokens, logits = [], []
    for _ in range(steps):
        tokens.append(int(session.next_logits.argmax()))
        logits.append(decoder.step(tokens[-1], session.length))
        session.next_logits = logits[-1]
        session.length += 1
    return tokens, torch.stack(logits), session


def test_static_steps_match_ordinary_decoding(load_tiny, text_ids):
    runtime = load_tiny("fa3_bf16")
    want_tokens, want_logits, want = ordinary_decode(runtime, text_ids[:50], STEPS)
    got_tokens, got_logits, got = static_decode(runtime, text_ids[:50], STEPS, graph=False)
    assert got_tokens == want_tokens
    torch.testing.assert_close(got_logits, want_logits, atol=1e-4, rtol=1e-4)
    # the cache's host-side length kept up: prefill continues and rollback works after static steps
    assert got.cache.get_seq_length() == want.cache.get_seq_length() == 50 + STEPS
    torch.testing.assert_close(got.prefill(text_ids[50:70], token_logprobs=True),
                               want.prefill(text_ids[50:70], token_logprobs=True), atol=1e-4, rtol=1e-4)


def test_only_fa3_with_split_decode_runs_static(load_tiny, monkeypatch):
    fa3 = load_tiny("fa3_bf16")
    assert supports_static_decode(fa3, Session(fa3).cache)
    assert not supports_static_decode(load_tiny("sdpa"), Session(load_tiny("sdpa")).cache)
    monkeypatch.setattr("worker.llm.attention._decode_attention", "sdpa")
    assert not supports_static_decode(fa3, Session(fa3).cache)
    with pytest.raises(ValueError, match="split decode"):
        StaticDecoder(fa3, Session(fa3).cache, 0, 4, graph=False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_graph_replay_matches_eager_static_steps(tiny_llama, text_ids):
    from worker.llm.runtime import load_runtime

    set_decode_attention("split")
    runtime = load_runtime(str(tiny_llama), attention_impl="fa3_bf16", device="cuda")
    want_tokens, want_logits, _ = static_decode(runtime, text_ids[:300], STEPS, graph=False)
    got_tokens, got_logits, _ = static_decode(runtime, text_ids[:300], STEPS, graph=True)
    assert got_tokens == want_tokens
    torch.testing.assert_close(got_logits, want_logits, atol=1e-3, rtol=1e-3)
    # and the session uses the graph by itself on a GPU
    session = Session(runtime)
    session.prefill(text_ids[:300])
    generated = session.generate(STEPS)  # stops early at an end-of-sequence token
    assert generated == want_tokens[: len(generated)]
