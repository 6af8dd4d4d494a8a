"""`noop`: reports the document's length and does nothing else; measures the per-document service overhead."""
from __future__ import annotations

from core.task_specs import NoopOptions
from worker.tasks.base import Document, Task, register_task


@register_task
class NoopTask(Task):
    """Returns {"chars": n}."""

    name = "noop"

    def process(self, document: Document, options: NoopOptions) -> dict:
        """Return the document's character count."""
        return {"chars": len(document.text)}
