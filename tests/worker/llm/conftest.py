"""A tiny random-weight Llama checkpoint (MiniLM tokenizer), saved once per session, loaded by the real code."""
import pytest

from worker.llm.random_checkpoint import save_tiny_llama
from worker.llm.runtime import load_runtime

TEXT = (
    "Long documents are read in chunks so that memory stays bounded. The cache keeps keys and values of every "
    "layer, and each new chunk attends to everything before it. Several short documents share a pass when "
    "they are packed end to end, each one seeing only itself. "
) * 3


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """Folder of the tiny checkpoint."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


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


@pytest.fixture
def llm_settings(tiny_llama, monkeypatch):
    """Settings whose LLM is the tiny checkpoint (as a worker reads them from the environment)."""
    from core.settings import get_settings

    monkeypatch.setenv("DOCFLASH_LLM_MODEL", str(tiny_llama))
    monkeypatch.setenv("DOCFLASH_PREFILL_CHUNK_TOKENS", "64")
    monkeypatch.setenv("DOCFLASH_PACK_TOKEN_BUDGET", "128")
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()
