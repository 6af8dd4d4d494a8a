"""Chunked prefill over the KV cache gives the one-pass logits; log-probs, decoding, rollback and the context limit."""
import pytest
import torch

from worker.llm.session import ContextOverflowError, Session


def one_pass_logits(runtime, ids):
    with torch.inference_mode():
        return runtime.model(input_ids=torch.tensor([ids]), logits_to_keep=0).logits[0].float()


@pytest.mark.parametrize("chunk", [5, 7, 64, 4096], ids=["chunk-5", "chunk-7", "chunk-64", "one-chunk"])
def test_chunked_prefill_matches_one_pass(load_tiny, text_ids, chunk):
    runtime = load_tiny(prefill_chunk_tokens=chunk)
    reference = one_pass_logits(runtime, text_ids)
    session = Session(runtime)
    logprobs = session.prefill(text_ids, token_logprobs=True)
    expected = torch.log_softmax(reference[:-1], -1).gather(1, torch.tensor(text_ids[1:])[:, None]).squeeze(1)
    assert logprobs.shape == (len(text_ids) - 1,)
    torch.testing.assert_close(logprobs, expected, atol=0.05, rtol=0.02)
    torch.testing.assert_close(session.next_logits, reference[-1], atol=0.05, rtol=0.02)
    assert session.length == len(text_ids) == session.usage.input_tokens
    assert session.usage.prefill_s > 0


def test_logprobs_continue_across_prefills(load_tiny, text_ids):
    runtime = load_tiny(prefill_chunk_tokens=16)
    whole = Session(runtime).prefill(text_ids, token_logprobs=True)
    session = Session(runtime)
    first = session.prefill(text_ids[:50], token_logprobs=True)
    second = session.prefill(text_ids[50:], token_logprobs=True)
    assert second.shape == (len(text_ids) - 50,)
    torch.testing.assert_close(torch.cat([first, second]), whole, atol=0.05, rtol=0.02)


def test_generate_is_greedy_continuation(load_tiny, text_ids):
    runtime = load_tiny(prefill_chunk_tokens=32)
    session = Session(runtime)
    session.prefill(text_ids[:40])
    generated = session.generate(6)
    assert 0 < len(generated) <= 6 and session.usage.output_tokens == len(generated)
    logits = one_pass_logits(runtime, text_ids[:40] + generated)
    assert [int(token) for token in logits[39:-1].argmax(-1)] == generated
    assert session.usage.decode_s > 0


def test_rollback_restores_the_stream(load_tiny, text_ids):
    session = Session(load_tiny(prefill_chunk_tokens=16))
    session.prefill(text_ids[:30])
    mark = session.checkpoint()
    first = session.prefill(text_ids[30:40], token_logprobs=True)
    session.rollback(mark)
    assert session.length == 30
    again = session.prefill(text_ids[30:40], token_logprobs=True)
    torch.testing.assert_close(again, first)
    with pytest.raises(ValueError, match="later checkpoint"):
        Session(session.runtime).rollback(mark)


def test_context_overflow_is_refused(load_tiny, text_ids):
    runtime = load_tiny()
    session = Session(runtime)
    with pytest.raises(ContextOverflowError, match="exceed the model's context of 512"):
        session.prefill((text_ids * 4)[: runtime.max_context + 1])
    with pytest.raises(ValueError, match="prefilled stream"):
        session.generate(3)


def test_the_cache_fills_to_the_context_length_and_no_further(load_tiny, text_ids):
    runtime = load_tiny(prefill_chunk_tokens=16, max_context=48)
    session = Session(runtime)
    session.prefill(text_ids[:46])
    mark = session.checkpoint()
    assert len(session.generate(10)) == 2 and session.length == 48
    with pytest.raises(ContextOverflowError, match="49 tokens exceed the model's context of 48"):
        session.prefill(text_ids[46:47])
    assert session.length == session.cache.get_seq_length() == 48
    session.rollback(mark)
    session.prefill(text_ids[46:48])
    assert session.cache.get_seq_length() == 48 == session.cache.get_max_length()
