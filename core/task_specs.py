"""The options each task accepts, as torch-free pydantic models, so that bad options are refused at submit time."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from core.json_schema import model_from_schema

# Position embeddings of the MiniLM encoder; a chunk (with its two special tokens) must fit in them.
ENCODER_MAX_CHUNK_TOKENS = 510


class UnknownTaskError(ValueError):
    """A task name that no worker implements."""


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class NoopOptions(_Options):
    """`noop` reads the document and reports its size; it measures the per-document overhead of the service."""


class StatsOptions(_Options):
    """`stats`: characters, words, sentences, lines and tokens of the tokenizer of `tokenizer`."""

    tokenizer: Literal["encoder", "llm"] = Field(
        "encoder", description="count tokens with the embedding encoder's tokenizer or with the LLM's"
    )


class EmbedOptions(_Options):
    """`embed`: one vector per document, the token-weighted mean of its chunks' embeddings."""

    model: Literal["encoder", "llm"] = "encoder"
    chunk_tokens: int = Field(256, ge=8, le=32768, description="tokens per chunk")

    @field_validator("chunk_tokens")
    @classmethod
    def _chunk_fits_the_encoder(cls, chunk_tokens: int, info: ValidationInfo) -> int:
        if info.data.get("model") == "encoder" and chunk_tokens > ENCODER_MAX_CHUNK_TOKENS:
            raise ValueError(f"must be at most {ENCODER_MAX_CHUNK_TOKENS} with model='encoder'")
        return chunk_tokens


class SummarizeOptions(_Options):
    """`summarize`: extractive (the most central sentences) or abstractive (written by the LLM)."""

    method: Literal["extractive", "abstractive"] = "extractive"
    sentences: int = Field(5, ge=1, le=100, description="sentences in an extractive summary")
    max_new_tokens: int = Field(256, ge=1, le=8192)
    prompt: str | None = Field(None, min_length=1, max_length=4000)
    map_reduce: bool = False

    @field_validator("prompt", "map_reduce")
    @classmethod
    def _llm_options_need_abstractive(cls, value: Any, info: ValidationInfo) -> Any:
        if value and info.data.get("method") == "extractive":
            raise ValueError("applies only to method='abstractive'")
        return value


class ExtractOptions(_Options):
    """`extract`: fill a JSON schema (an object with properties) from the document; a schema that the
    worker cannot turn into a validator (`$ref`, `anyOf`, ...) is refused with its place in the schema."""

    json_schema: dict[str, Any] = Field(alias="schema", description="JSON schema of the object to extract")
    max_new_tokens: int = Field(512, ge=1, le=8192)

    @field_validator("json_schema")
    @classmethod
    def _object_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        if schema.get("type") != "object":
            raise ValueError("the schema must describe an object (\"type\": \"object\")")
        properties = schema.get("properties")
        if not isinstance(properties, dict) or not properties:
            raise ValueError("the schema must list the fields to extract under \"properties\"")
        model_from_schema(schema)
        return schema


class ClassifyOptions(_Options):
    """`classify`: pick one of `labels` for the document."""

    labels: list[str] = Field(min_length=2, max_length=100)
    prompt: str | None = Field(None, min_length=1, max_length=4000)

    @field_validator("labels")
    @classmethod
    def _distinct_labels(cls, labels: list[str]) -> list[str]:
        cleaned = [label.strip() for label in labels]
        if not all(cleaned):
            raise ValueError("labels must not be empty strings")
        if len(set(cleaned)) != len(cleaned):
            raise ValueError("labels must be distinct")
        return cleaned


class ScoreOptions(_Options):
    """`score`: the LLM's per-token log-likelihood of the document, optionally per chunk of `chunk_tokens`."""

    chunk_tokens: int | None = Field(None, ge=16, le=1_048_576)


TASK_OPTIONS: dict[str, type[BaseModel]] = {
    "noop": NoopOptions,
    "stats": StatsOptions,
    "embed": EmbedOptions,
    "summarize": SummarizeOptions,
    "extract": ExtractOptions,
    "classify": ClassifyOptions,
    "score": ScoreOptions,
}


def validate_options(task: str, options: dict[str, Any] | None) -> BaseModel:
    """Return the validated options model of `task`.

    Raises UnknownTaskError for a task no worker runs, and pydantic's ValidationError (whose errors name
    each bad field) for bad options.
    """
    try:
        model = TASK_OPTIONS[task]
    except (KeyError, TypeError):
        raise UnknownTaskError(f"unknown task {task!r}; known tasks: {', '.join(sorted(TASK_OPTIONS))}") from None
    return model.model_validate(options or {})


def options_error(exc: ValidationError) -> tuple[str, str]:
    """The field (`options.<path>`) and message of the first error that `validate_options` raised."""
    first = exc.errors()[0]
    return ".".join(["options", *(str(part) for part in first["loc"])]), first["msg"]
