"""`classify`: pick the label the LLM finds most likely after the document (one shared prefill, then each label)."""
import math

from core.settings import get_settings
from core.task_specs import ClassifyOptions
from worker.llm.prompts import DocumentPrompt, document_room, encode_document, encode_text
from worker.llm.runtime import LLMRuntime, get_runtime
from worker.llm.session import Session
from worker.tasks.base import Document, Task, about_document, register_task


def classify_text(runtime: LLMRuntime, text: str, labels: list[str], prompt: str | None) -> dict:
    """Prefill the prompt around `text` once, then score each label's tokens from that KV cache, rolled back
    after each; the label with the highest total log-likelihood wins."""
    instruction = prompt or f"Classify the document as one of: {', '.join(labels)}."
    template = DocumentPrompt(runtime.tokenizer, f"{instruction}\n\n", "\n\nLabel:")
    separator = "" if runtime.tokenizer.chat_template else " "
    label_ids = [encode_text(runtime.tokenizer, separator + label) for label in labels]
    room = document_room(runtime.max_context, template, max(len(ids) for ids in label_ids))
    document_ids = encode_document(runtime.tokenizer, text, room, runtime.max_context)
    session = Session(runtime)
    session.prefill(template.render(document_ids))
    after_document = session.checkpoint()
    scores = {}
    for label, ids in zip(labels, label_ids):
        scores[label] = float(session.prefill(ids, token_logprobs=True).sum())
        session.rollback(after_document)
    top = max(scores.values())
    total = sum(math.exp(score - top) for score in scores.values())
    return {
        "label": max(labels, key=scores.__getitem__),
        "logprobs": scores,
        "probabilities": {label: math.exp(score - top) / total for label, score in scores.items()},
        "usage": session.usage.as_dict(runtime.attention_impl),
    }


@register_task
class ClassifyTask(Task):
    """Zero-shot classification by label log-likelihood."""
    name = "classify"

    def process(self, document: Document, options: ClassifyOptions) -> dict:
        """Classify one document into one of `options.labels`."""
        runtime = get_runtime(get_settings(), "classification")
        with about_document(document.id):
            return classify_text(runtime, document.text, list(options.labels), options.prompt)
