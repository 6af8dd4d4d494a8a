"""Compiling the pointwise blocks keeps the model's parameters and its logits, and leaves small inputs eager."""
import pytest
import torch
from torch._dynamo.utils import counters
from transformers import AutoModelForCausalLM
from transformers.models.llama import modeling_llama

from worker.llm.compiled_blocks import LongInputsCompiled, compile_pointwise_blocks, pointwise_blocks, rotary_sources


@pytest.fixture
def tiny_model(tiny_llama, monkeypatch):
    """The tiny Llama in fp32; the rotary function that compiling replaces process-wide is restored afterwards."""
    monkeypatch.setattr(modeling_llama, "apply_rotary_pos_emb", modeling_llama.apply_rotary_pos_emb)
    torch._dynamo.reset()
    counters.clear()
    return AutoModelForCausalLM.from_pretrained(str(tiny_llama), dtype=torch.float32).eval()


def test_finds_every_norm_mlp_and_rotary_function(tiny_model):
    layers = tiny_model.config.num_hidden_layers
    names = [type(block).__name__ for block in pointwise_blocks(tiny_model)]
    assert names.count("LlamaRMSNorm") == 2 * layers + 1  # two per layer, and the final norm
    assert names.count("LlamaMLP") == layers
    assert len(names) == 3 * layers + 1
    assert rotary_sources(tiny_model) == [modeling_llama]


def test_compiled_blocks_give_eager_logits_at_any_length(tiny_model):
    """aot_eager traces and runs each block as inductor would receive it, without a C++ toolchain on the CPU:
    the norms share one dynamic-shape graph, the MLPs another and the rotary function a third, at both lengths;
    compiling again changes nothing."""
    ids = torch.randint(0, tiny_model.config.vocab_size, (1, 13), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        eager = [tiny_model(input_ids=ids[:, :n]).logits for n in (7, 13)]
        names = sorted(name for name, _ in tiny_model.named_parameters())
        layers = tiny_model.config.num_hidden_layers
        assert compile_pointwise_blocks(tiny_model, backend="aot_eager", min_elements=0) == 3 * layers + 2
        assert compile_pointwise_blocks(tiny_model, backend="aot_eager", min_elements=0) == 0
        compiled = [tiny_model(input_ids=ids[:, :n]).logits for n in (7, 13)]
    assert sorted(name for name, _ in tiny_model.named_parameters()) == names
    assert isinstance(modeling_llama.apply_rotary_pos_emb, LongInputsCompiled)
    assert counters["stats"]["unique_graphs"] == 3
    for got, want in zip(compiled, eager):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_inputs_below_the_threshold_run_eager(tiny_model):
    compile_pointwise_blocks(tiny_model, backend="aot_eager", min_elements=10**9)
    with torch.no_grad():
        tiny_model(input_ids=torch.tensor([[1, 2, 3]]))
    assert counters["stats"]["unique_graphs"] == 0



def test_the_size_test_reads_a_keyword_first_argument():
    torch._dynamo.reset()
    counters.clear()
    wrapped = LongInputsCompiled(lambda x, scale: x * scale, "aot_eager", min_elements=10)
    assert torch.equal(wrapped(x=torch.ones(3), scale=2.0), torch.full((3,), 2.0))
    assert counters["stats"]["unique_graphs"] == 0  # small: eager
    assert torch.equal(wrapped(x=torch.ones(12), scale=3.0), torch.full((12,), 3.0))
    assert counters["stats"]["unique_graphs"] == 1
