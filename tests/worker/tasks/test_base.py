"""The task registry and the per-document error handling of batches."""
import pytest

from core.documents import DocumentError
from core.task_specs import UnknownTaskError, validate_options
from worker.tasks import base, get_task, task_names
from worker.tasks.base import BatchTask, Task, register_task


@pytest.fixture
def empty_registry(monkeypatch):
    monkeypatch.setattr(base, "_REGISTRY", {})
    monkeypatch.setattr(base, "_INSTANCES", {})


def test_the_package_registers_the_first_tasks():
    assert {"noop", "stats", "embed", "summarize"} <= set(task_names())


def test_get_task_builds_one_instance_per_process():
    assert get_task("noop") is get_task("noop")


def test_unknown_task():
    with pytest.raises(UnknownTaskError, match="unknown task 'translate'; registered tasks: .*noop"):
        get_task("translate")


def test_register_task_refuses_a_name_without_options(empty_registry):
    with pytest.raises(ValueError, match="'translate' has no options model"):
        @register_task
        class Translate(Task):
            name = "translate"

            def process(self, document, options):
                return {}


def test_register_task_refuses_a_second_class_for_a_name(empty_registry):
    @register_task
    class First(Task):
        name = "score"

        def process(self, document, options):
            return {"first": True}

    with pytest.raises(ValueError, match="'score' is already registered by .*First"):
        @register_task
        class Second(Task):
            name = "score"

            def process(self, document, options):
                return {}

    assert get_task("score").process(None, None) == {"first": True}


def test_register_task_refuses_non_tasks(empty_registry):
    with pytest.raises(TypeError, match="not a Task subclass"):
        register_task(dict)


def test_batch_reports_a_document_error_per_document(make_document, texts):
    documents = [make_document(texts["wal"], "good"), make_document("   ", "blank"), make_document(texts["bread"], "b")]
    results = get_task("stats").process_batch(documents, validate_options("stats", {}))
    assert [type(result).__name__ for result in results] == ["dict", "DocumentError", "dict"]
    assert results[1].doc_id == "blank" and "blank: the document has no text" in str(results[1])


def test_batch_task_process_raises_the_document_error(make_document):
    task = get_task("embed")
    assert isinstance(task, BatchTask)
    with pytest.raises(DocumentError, match="empty: the document has no text to embed"):
        task.process(make_document("", "empty"), validate_options("embed", {}))


def test_other_errors_fail_the_whole_batch(make_document, texts, settings_without_llm):
    with pytest.raises(ValueError, match="tokenizer='llm' needs an LLM"):
        get_task("stats").process_batch([make_document(texts["wal"])], validate_options("stats", {"tokenizer": "llm"}))
