"""`extract`: the LLM fills a JSON schema from the document; the answer is validated, with one retry."""
import json

from pydantic import BaseModel

from core.documents import DocumentError
from core.json_schema import model_from_schema
from core.settings import get_settings
from core.task_specs import ExtractOptions
from worker.llm.prompts import DocumentPrompt, document_room, encode_document
from worker.llm.runtime import LLMRuntime, get_runtime
from worker.llm.session import Session
from worker.tasks.base import Document, Task, about_document, register_task

RETRY_MESSAGE = "That answer is not valid: {error}. Reply with only one JSON object that matches the schema.\nJSON:"


def find_json_object(text: str) -> dict:
    """The first JSON object in `text` (code fences and surrounding prose are skipped); ValueError if none."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            return decoder.raw_decode(text, start)[0]
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
    raise ValueError("the answer contains no JSON object")


def validate_answer(answer: str, model: type[BaseModel]) -> dict:
    """The JSON object in `answer`, validated by `model`; ValueError (or pydantic's ValidationError) if not."""
    return model.model_validate(find_json_object(answer)).model_dump(by_alias=True, exclude_unset=True)


def _short_error(error: Exception) -> str:
    return " ".join(str(error).split())[:400]


def extract_from_text(runtime: LLMRuntime, text: str, schema: dict, max_new_tokens: int) -> dict:
    """Generate JSON for `schema` from `text`; an invalid answer gets one retry in the same conversation,
    then the document fails with the validation error. `schema` is one that `ExtractOptions` accepted."""
    model = model_from_schema(schema)
    template = DocumentPrompt(
        runtime.tokenizer,
        "Extract information from the document below as one JSON object that matches this JSON schema:\n"
        f"{json.dumps(schema)}\n\nDocument:\n",
        "\n\nAnswer with the JSON object only.",
    )
    room = document_room(runtime.max_context, template, max_new_tokens)
    document_ids = encode_document(runtime.tokenizer, text, room, runtime.max_context)
    session = Session(runtime)
    session.prefill(template.render(document_ids))
    after_prompt = session.checkpoint()
    answer = runtime.tokenizer.decode(session.generate(max_new_tokens), skip_special_tokens=True)
    try:
        data, attempts = validate_answer(answer, model), 1
    except ValueError as first_error:
        session.rollback(after_prompt)
        try:
            session.prefill(template.followup_ids(answer, RETRY_MESSAGE.format(error=_short_error(first_error))))
            answer = runtime.tokenizer.decode(session.generate(max_new_tokens), skip_special_tokens=True)
            data, attempts = validate_answer(answer, model), 2
        except ValueError as error:  # includes the stream outgrowing the context
            raise DocumentError(
                f"the model's answer is not valid JSON for the schema after 2 attempts: {_short_error(error)}"
            ) from None
    return {"data": data, "attempts": attempts, "usage": session.usage.as_dict(runtime.attention_impl)}


@register_task
class ExtractTask(Task):
    """Structured extraction into a caller's JSON schema."""
    name = "extract"

    def process(self, document: Document, options: ExtractOptions) -> dict:
        """Extract `options.json_schema` from one document."""
        runtime = get_runtime(get_settings(), "extraction")
        with about_document(document.id):
            return extract_from_text(runtime, document.text, options.json_schema, options.max_new_tokens)
