"""Varlen packing: packed passes give what each sequence gives alone."""
import pytest
import torch

from worker.llm.packing import PackedBatch, packed_outputs, plan_packs


@pytest.mark.parametrize(
    ("lengths", "budget", "packs"),
    [
        ([3, 4, 5], 7, [[0, 1], [2]]),
        ([3, 4, 5], 100, [[0, 1, 2]]),
        ([9, 2, 2], 4, [[0], [1, 2]]),
    ],
    ids=["split", "all-in-one", "long-alone"],
)
def test_plan_packs(lengths, budget, packs):
    assert plan_packs(lengths, budget) == packs


def test_plan_packs_refuses_empty_sequences():
    with pytest.raises(ValueError, match="sequence 1 is empty"):
        plan_packs([3, 0], 10)


def test_packed_batch_layout():
    with torch.inference_mode():  # as packed_outputs builds it
        batch = PackedBatch.build([[5, 6, 7], [8, 9]], torch.device("cpu"))
    assert not batch.cu_seq_lens.is_inference()  # fa3fp8 checks a normal tensor's offsets once, not per layer
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 0, 1]]
    assert batch.cu_seq_lens.tolist() == [0, 3, 5] and batch.max_length == 3
    assert [part.tolist() for part in batch.split(batch.input_ids[0])] == [[5, 6, 7], [8, 9]]


@pytest.mark.parametrize("output", ["logprobs", "hidden"])
def test_packed_outputs_match_single_passes(load_tiny, text_ids, output):
    runtime = load_tiny(pack_token_budget=80)
    sequences = [text_ids[:30], text_ids[10:60], text_ids[5:12], text_ids[40:120]]
    packed = packed_outputs(runtime, sequences, output)
    for sequence, result in zip(sequences, packed):
        [alone] = packed_outputs(runtime, [sequence], output)
        with torch.inference_mode():
            if output == "hidden":
                expected = runtime.model.get_decoder()(input_ids=torch.tensor([sequence])).last_hidden_state[0].float()
            else:
                logits = runtime.model(input_ids=torch.tensor([sequence])).logits[0].float()
                expected = torch.log_softmax(logits[:-1], -1).gather(1, torch.tensor(sequence[1:])[:, None]).squeeze(1)
        torch.testing.assert_close(result.values, expected, atol=0.05, rtol=0.02)
        torch.testing.assert_close(alone.values, expected, atol=0.05, rtol=0.02)
        assert result.seconds > 0
