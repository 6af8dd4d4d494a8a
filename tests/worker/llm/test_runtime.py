"""Loading through the real code: from a folder, from settings, once per process."""
import pytest
import structlog
import torch
from fa3fp8.gpu import is_hopper

from core.settings import Settings
from worker.llm.runtime import attention_for, get_runtime, load_runtime

HOPPER = torch.cuda.is_available() and is_hopper(torch.cuda.get_device_capability())


def test_loads_checkpoint_in_bf16(load_tiny, tiny_llama):
    runtime = load_tiny()
    assert next(runtime.model.parameters()).dtype == torch.bfloat16
    assert runtime.model.config._attn_implementation == "sdpa"
    assert runtime.max_context == 512 and runtime.vocab_size == len(runtime.tokenizer)
    assert runtime.tokenizer.sep_token_id in runtime.eos_token_ids
    assert runtime.cache_kwarg in ("cache", "past_key_values")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"attention_impl": "flash"}, "attention_impl must be one of"),
        ({"prefill_chunk_tokens": 0}, "must be positive"),
    ],
    ids=["unknown-impl", "zero-chunk"],
)
def test_bad_options_are_refused(tiny_llama, options, message):
    with pytest.raises(ValueError, match=message):
        load_runtime(str(tiny_llama), device="cpu", **options)


def test_runtime_from_settings_is_loaded_once(tiny_llama):
    settings = Settings(
        llm_model=str(tiny_llama), llm_max_context=256, prefill_chunk_tokens=32, attention_impl="fa3_fp8"
    )
    runtime = get_runtime(settings)
    assert get_runtime(settings) is runtime
    assert runtime.max_context == 256 and runtime.prefill_chunk_tokens == 32
    assert runtime.attention_impl == ("fa3_fp8" if HOPPER else "sdpa")


def test_a_device_without_fa3_logs_the_implementation_it_takes_once(tiny_llama):
    if HOPPER:
        pytest.skip("fa3 runs on this Hopper GPU")
    settings = Settings(llm_model=str(tiny_llama), llm_max_context=128, attention_impl="fa3_bf16")
    with structlog.testing.capture_logs() as logs:
        get_runtime(settings)
        get_runtime(settings)
    [logged] = [entry for entry in logs if entry["event"] == "attention_impl_unavailable"]
    assert logged["configured"] == "fa3_bf16" and logged["used"] == "sdpa"


@pytest.mark.parametrize("device_type,capability,expected", [
    ("cuda", (9, 0), "fa3_fp8"), ("cuda", (8, 0), "sdpa"), ("cuda", (8, 9), "sdpa"), ("cuda", (10, 0), "sdpa"),
    ("cpu", None, "sdpa"),
])
def test_fa3_runs_on_hopper_and_sdpa_elsewhere(device_type, capability, expected):
    assert attention_for("fa3_fp8", device_type, capability) == expected
    assert attention_for("sdpa", device_type, capability) == "sdpa"


def test_runtime_needs_a_model():
    with pytest.raises(ValueError, match=r"scoring needs an LLM \(settings.llm_model\): set DOCFLASH_LLM_MODEL"):
        get_runtime(Settings(llm_model=None), "scoring")
