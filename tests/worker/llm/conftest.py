"""The tiny Llama (`tiny_llama`, tests/worker/conftest.py) loaded by the real code, and a text to feed it."""
import pytest

from worker.llm.runtime import load_runtime

TEXT = (
    "Long documents are read in chunks so that memory stays bounded. The cache keeps keys and values of every "
    "layer, and each new chunk attends to everything before it. Several short documents share a pass when "
    "they are packed end to end, each one seeing only itself. "
) * 3


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

