"""Load a causal LM and its tokenizer once per worker process, with the configured attention implementation."""
import inspect
import threading
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from core.logging import get_logger
from core.settings import PREFILL_CHUNK_TOKENS
from worker.llm.attention import (
    ATTENTION_IMPLEMENTATIONS,
    FA3_IMPLEMENTATIONS,
    fa3_unsupported,
    register_fa3_attention,
    set_decode_attention,
)
from worker.llm.compiled_blocks import compile_pointwise_blocks

log = get_logger()


@dataclass(frozen=True)
class LLMRuntime:
    """A loaded model with what the prefill and decode code needs to drive it."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    attention_impl: str
    device: torch.device
    max_context: int
    prefill_chunk_tokens: int
    pack_token_budget: int
    eos_token_ids: frozenset[int]
    cache_kwarg: str
    decode_graph: bool  # replay decode steps from a CUDA graph where the attention allows (decode_graph.py)

    @property
    def vocab_size(self) -> int:
        """Number of logits per position."""
        return self.model.get_output_embeddings().weight.shape[0]


def default_device() -> torch.device:
    """The worker's GPU when there is one, else the CPU."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def attention_for(attention_impl: str, device_type: str, capability: tuple[int, int] | None = None) -> str:
    """The attention implementation a runtime takes for the configured one on a device of `device_type` (a CUDA
    device's compute `capability`): fa3's kernels run on Hopper (9.x); on the CPU and other GPUs fa3fp8 would serve
    its PyTorch reference, far slower than SDPA, so they take sdpa."""
    if device_type != "cuda" or capability is None:
        return "sdpa"
    from fa3fp8.gpu import is_hopper  # fa3fp8 is imported where its kernels may run, as in worker.llm.attention

    return attention_impl if is_hopper(capability) else "sdpa"


def _check_attention_impl(attention_impl: str) -> None:
    if attention_impl not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(f"attention_impl must be one of {ATTENTION_IMPLEMENTATIONS}, got {attention_impl!r}")


def _eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    ids = set()
    for source in (model.generation_config.eos_token_id if model.generation_config else None,
                   model.config.eos_token_id, tokenizer.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(source)
    return frozenset(ids)


def _cache_kwarg(model: PreTrainedModel) -> str:
    """Newer transformers name the forward's KV-cache argument `cache`, older ones `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def load_runtime(
    model_name: str, *, attention_impl: str = "sdpa", device: torch.device | str | None = None, **options
) -> LLMRuntime:
    """Load `model_name` (a local folder, or a hub id resolved through the HF cache) in bf16 on `device`, wrapped by
    `runtime_for`; `options` are runtime_for's (max_context, prefill_chunk_tokens, pack_token_budget, decode_graph,
    compile_blocks)."""
    _check_attention_impl(attention_impl)
    register_fa3_attention()
    device = torch.device(device) if device is not None else default_device()
    tokenizer = AutoTokenizer.from_pretrained(model_name)
    model = AutoModelForCausalLM.from_pretrained(model_name, dtype=torch.bfloat16, attn_implementation=attention_impl)
    runtime = runtime_for(model.to(device), tokenizer, attention_impl=attention_impl, **options)
    log.info("llm_loaded", model=model_name, attention_impl=attention_impl, device=str(device),
             max_context=runtime.max_context)
    return runtime


def runtime_for(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    *,
    attention_impl: str,
    max_context: int | None = None,
    prefill_chunk_tokens: int = PREFILL_CHUNK_TOKENS,
    pack_token_budget: int = 8192,
    decode_graph: bool = True,
    compile_blocks: bool = True,
) -> LLMRuntime:
    """Wrap a model already in memory, switching its attention to `attention_impl` (sdpa, or eager where the model
    has no sdpa path, with a warning, where an fa3 implementation would not compute the model's attention:
    `fa3_unsupported`).

    `max_context` defaults to the model's `max_position_embeddings`; `decode_graph` lets decode steps replay from
    a CUDA graph where the attention implementation allows it (`decode_graph.py`); `compile_blocks` compiles the
    norm, MLP and rotary blocks of a model on a GPU (`compiled_blocks.py`; on the CPU it stays eager).
    """
    _check_attention_impl(attention_impl)
    if prefill_chunk_tokens < 1 or pack_token_budget < 1:
        raise ValueError("prefill_chunk_tokens and pack_token_budget must be positive")
    register_fa3_attention()
    missing = fa3_unsupported(model) if attention_impl in FA3_IMPLEMENTATIONS else []
    if missing:
        # such models (Gemma 2, gpt-oss) often lack an sdpa path in transformers too: theirs is eager then
        used = "sdpa" if getattr(model, "_supports_sdpa", False) else "eager"
        log.warning("attention_impl_unavailable", configured=attention_impl, used=used,
                    reason=f"fa3 attention does not compute {' or '.join(missing)}")
        attention_impl = used
    if model.config._attn_implementation != attention_impl:
        model.set_attn_implementation(attention_impl)
    if compile_blocks and model.device.type == "cuda":
        compile_pointwise_blocks(model)
    context = max_context or getattr(model.config.get_text_config(), "max_position_embeddings", None)
    if not context:
        raise ValueError("the model's config has no max_position_embeddings; set the context length")
    return LLMRuntime(
        model=model.eval(),
        tokenizer=tokenizer,
        attention_impl=attention_impl,
        device=model.device,
        max_context=int(context),
        prefill_chunk_tokens=prefill_chunk_tokens,
        pack_token_budget=pack_token_budget,
        eos_token_ids=_eos_token_ids(model, tokenizer),
        cache_kwarg=_cache_kwarg(model),
        decode_graph=decode_graph,
    )


_runtimes: dict[tuple, LLMRuntime] = {}
_lock = threading.Lock()


def get_runtime(settings, purpose: str = "this task") -> LLMRuntime:
    """The process's runtime for `settings.llm_model`, loaded on first use (fa3 takes sdpa on the CPU and on GPUs other
    than Hopper: attention_for).

    Without a configured model, a ValueError says that `purpose` needs one.
    """
    if not settings.llm_model:
        raise ValueError(f"{purpose} needs an LLM (settings.llm_model): set DOCFLASH_LLM_MODEL to a folder or hub id")
    device = default_device()
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    impl = attention_for(settings.attention_impl, device.type, capability)
    set_decode_attention(settings.decode_attention)
    key = (settings.llm_model, impl, str(device), settings.llm_max_context, settings.prefill_chunk_tokens,
           settings.pack_token_budget, settings.decode_cuda_graph, settings.compile_blocks)
    with _lock:
        if key not in _runtimes:
            if impl != settings.attention_impl:
                log.warning("attention_impl_unavailable", configured=settings.attention_impl, used=impl,
                            device=str(device), capability=capability,
                            reason="fa3 kernels need a Hopper GPU (compute capability 9.x)")
            _runtimes[key] = load_runtime(
                settings.llm_model,
                attention_impl=impl,
                device=device,
                max_context=settings.llm_max_context,
                prefill_chunk_tokens=settings.prefill_chunk_tokens,
                pack_token_budget=settings.pack_token_budget,
                decode_graph=settings.decode_cuda_graph,
                compile_blocks=settings.compile_blocks,
            )
        return _runtimes[key]
