"""Abstractive summaries with the LLM: one pass when the document fits the context, map-reduce when asked."""
from core.documents import DocumentError
from worker.llm.prompts import DocumentPrompt, document_room, encode_text
from worker.llm.runtime import LLMRuntime
from worker.llm.session import Session, Usage

DEFAULT_INSTRUCTION = "Summarize the following document."


def summary_prompt(runtime: LLMRuntime, prompt: str | None) -> DocumentPrompt:
    """The prompt around the document: `prompt` may place the document with `{document}`, else it precedes it."""
    if prompt and "{document}" in prompt:
        before, after = prompt.split("{document}", 1)
        return DocumentPrompt(runtime.tokenizer, before, after)
    return DocumentPrompt(runtime.tokenizer, f"{prompt or DEFAULT_INSTRUCTION}\n\n", "\n\nSummary:")


def _summarize_ids(runtime: LLMRuntime, prompt: DocumentPrompt, document_ids: list[int], max_new_tokens: int,
                   usage: Usage) -> str:
    session = Session(runtime, usage)
    session.prefill(prompt.render(document_ids))
    return runtime.tokenizer.decode(session.generate(max_new_tokens), skip_special_tokens=True).strip()


def summarize(runtime: LLMRuntime, text: str, *, prompt: str | None, max_new_tokens: int, map_reduce: bool) -> dict:
    """Summarize `text`; a document longer than the context is a DocumentError unless `map_reduce` is set,
    in which case its parts are summarized and the joined part summaries summarized again."""
    template = summary_prompt(runtime, prompt)
    room = document_room(runtime.max_context, template, max_new_tokens)
    document_ids = encode_text(runtime.tokenizer, text)
    if not document_ids:
        raise DocumentError("document has no tokens")
    if len(document_ids) > room and not map_reduce:
        raise DocumentError(
            f"document is {len(document_ids)} tokens; the model's context of {runtime.max_context} tokens leaves "
            f"room for {room} with this prompt and max_new_tokens={max_new_tokens} (set map_reduce to summarize "
            f"it in parts)"
        )
    usage = Usage()
    parts = 0
    while len(document_ids) > room:
        pieces = [document_ids[start : start + room] for start in range(0, len(document_ids), room)]
        partials = [_summarize_ids(runtime, template, piece, max_new_tokens, usage) for piece in pieces]
        parts += len(pieces)
        joined = encode_text(runtime.tokenizer, "\n\n".join(partial for partial in partials if partial))
        if not joined or len(joined) >= len(document_ids):
            raise DocumentError("map-reduce summaries do not get shorter than the document; lower max_new_tokens")
        document_ids = joined
    summary = _summarize_ids(runtime, template, document_ids, max_new_tokens, usage)
    return {
        "summary": summary, "method": "abstractive", "parts": parts + 1, "usage": usage.as_dict(runtime.attention_impl)
    }
