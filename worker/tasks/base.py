"""The task interface: a Task turns one document (or a batch of them) into a JSON-able result.

Tasks register by name; `get_task` builds one instance per process on first use, so each task loads its
models once per worker process and never at import.
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import BaseModel

from core.documents import DocumentError
from core.task_specs import TASK_OPTIONS, UnknownTaskError

_REGISTRY: dict[str, type[Task]] = {}
_INSTANCES: dict[str, Task] = {}
_INSTANCES_LOCK = threading.Lock()


@dataclass(frozen=True)
class Document:
    """A document to process: its id within the job, its plain text, and metadata passed through."""

    id: str
    text: str
    metadata: dict = field(default_factory=dict)


class Task(ABC):
    """A named operation on documents; options come validated by `core.task_specs.validate_options`."""

    name: ClassVar[str]

    @abstractmethod
    def process(self, document: Document, options: BaseModel) -> dict:
        """Return the result for one document; raise DocumentError when this document cannot be processed."""

    def process_batch(self, documents: list[Document], options: BaseModel) -> list[dict | DocumentError]:
        """Return one result or DocumentError per document, in order; other exceptions fail the whole batch."""
        results: list[dict | DocumentError] = []
        for document in documents:
            try:
                results.append(self.process(document, options))
            except DocumentError as exc:
                results.append(_with_doc_id(exc, document))
        return results


class BatchTask(Task):
    """A task that handles several documents in one model pass: it implements `process_batch` (which returns
    a DocumentError per failed document), and `process` runs a batch of one."""

    def process(self, document: Document, options: BaseModel) -> dict:
        """Return the result for one document; raise its DocumentError."""
        [result] = self.process_batch([document], options)
        if isinstance(result, DocumentError):
            raise result
        return result

    @abstractmethod
    def process_batch(self, documents: list[Document], options: BaseModel) -> list[dict | DocumentError]:
        """Return one result or DocumentError per document, in order."""


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: make the task `cls.name` available to `get_task`."""
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"register_task: {cls!r} is not a Task subclass")
    name = getattr(cls, "name", None)
    if name not in TASK_OPTIONS:
        raise ValueError(f"register_task: task name {name!r} has no options model in core.task_specs.TASK_OPTIONS")
    registered = _REGISTRY.get(name)
    if registered is not None and _qualified(registered) != _qualified(cls):
        raise ValueError(f"register_task: {name!r} is already registered by {_qualified(registered)}")
    _REGISTRY[name] = cls
    return cls


def task_names() -> list[str]:
    """Names of the registered tasks, sorted."""
    return sorted(_REGISTRY)


def get_task(name: str) -> Task:
    """Return this process's instance of the task `name`, building it (and loading its models) on first use."""
    task = _INSTANCES.get(name)
    if task is not None:
        return task
    if name not in _REGISTRY:
        raise UnknownTaskError(f"unknown task {name!r}; registered tasks: {', '.join(task_names())}")
    with _INSTANCES_LOCK:
        if name not in _INSTANCES:
            _INSTANCES[name] = _REGISTRY[name]()
        return _INSTANCES[name]


def naming(error: DocumentError, document_id: str) -> DocumentError:
    """`error` with the document's id in front of its message and as its doc_id (as errors.jsonl shows it)."""
    return DocumentError(f"{document_id}: {error}", document_id)


def naming_documents(documents: list[Document], results: list[dict | DocumentError]) -> list[dict | DocumentError]:
    """`results` (one per document, in order) with each DocumentError naming its document."""
    return [
        naming(result, document.id) if isinstance(result, DocumentError) else result
        for document, result in zip(documents, results)
    ]


@contextmanager
def about_document(document_id: str) -> Iterator[None]:
    """Re-raise a DocumentError from the block as one that names `document_id`."""
    try:
        yield
    except DocumentError as error:
        raise naming(error, document_id) from None


def _with_doc_id(error: DocumentError, document: Document) -> DocumentError:
    if error.doc_id is None:
        error.doc_id = document.id
    return error


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
