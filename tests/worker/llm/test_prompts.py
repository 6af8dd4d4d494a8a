"""Prompts at the token level, with and without a chat template."""
import pytest
from transformers import AutoTokenizer

from core.documents import DocumentError
from worker.llm.prompts import DocumentPrompt, document_room, encode_document, encode_text

CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.fixture
def tokenizer(tiny_llama):
    return AutoTokenizer.from_pretrained(tiny_llama)


def test_plain_prompt_wraps_the_document(tokenizer):
    prompt = DocumentPrompt(tokenizer, "summarize this:\n", "\nsummary:")
    document = encode_text(tokenizer, "the cat sat on the mat")
    ids = prompt.render(document)
    assert ids[len(prompt.prefix_ids) : len(prompt.prefix_ids) + len(document)] == document
    assert tokenizer.decode(ids) == "summarize this : the cat sat on the mat summary :"
    assert prompt.overhead == len(ids) - len(document)


def test_chat_template_prompt_and_followup(tokenizer):
    tokenizer.chat_template = CHAT_TEMPLATE
    prompt = DocumentPrompt(tokenizer, "read ", " now")
    rendered = tokenizer.decode(prompt.render(encode_text(tokenizer, "alpha beta")))
    assert rendered == "< user > read alpha beta now < / user > < assistant >"
    followup = tokenizer.decode(prompt.followup_ids("gamma", "again"))
    assert followup == "gamma < / assistant > < user > again < / user > < assistant >"


def test_document_room_and_length_errors(tokenizer):
    prompt = DocumentPrompt(tokenizer, "a b c ", " d")
    assert document_room(100, prompt, 10) == 100 - 10 - prompt.overhead
    with pytest.raises(DocumentError, match="leave no room"):
        document_room(prompt.overhead + 5, prompt, 5)
    with pytest.raises(DocumentError, match="document is 6 tokens; the model's context of 50 tokens leaves room for 5"):
        encode_document(tokenizer, "one two three four five six", 5, 50)
    with pytest.raises(DocumentError, match="no tokens"):
        encode_document(tokenizer, "   ", 5, 50)
