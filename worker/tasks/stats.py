"""`stats`: counts of characters, words, sentences, paragraphs, lines and tokens."""
from __future__ import annotations

import re

from core.documents import DocumentError
from core.settings import get_settings
from core.task_specs import StatsOptions
from worker.encoder import embed_model_path, load_tokenizer
from worker.sentences import split_sentences
from worker.tasks.base import Document, Task, register_task

_WORD = re.compile(r"\w+(?:['’.,-]\w+)*")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


@register_task
class StatsTask(Task):
    """Counts; tokens are counted with the encoder's tokenizer, or the LLM's with tokenizer="llm"."""

    name = "stats"

    def __init__(self):
        self._encoder_tokenizer = load_tokenizer(embed_model_path())

    def process(self, document: Document, options: StatsOptions) -> dict:
        """Return the counts for one document."""
        text = document.text
        if not text.strip():
            raise DocumentError(f"{document.id}: the document has no text", document.id)
        tokenizer = self._encoder_tokenizer if options.tokenizer == "encoder" else _llm_tokenizer()
        return {
            "characters": len(text),
            "words": len(_WORD.findall(text)),
            "sentences": len(split_sentences(text)),
            "paragraphs": len([part for part in _PARAGRAPH_BREAK.split(text) if part.strip()]),
            "lines": len(text.splitlines()),
            "tokens": len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]),
            "tokenizer": options.tokenizer,
        }


def _llm_tokenizer():
    model = get_settings().llm_model
    if not model:
        raise ValueError("tokenizer='llm' needs an LLM: set DOCFLASH_LLM_MODEL (settings.llm_model)")
    return load_tokenizer(model)
