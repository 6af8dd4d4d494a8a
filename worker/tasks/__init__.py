"""Document tasks. Importing this package registers every task module, so `get_task(name)` finds them."""
from worker.tasks import (  # noqa: F401  (imported for their registration)
    classify, embed, extract, noop, score, stats, summarize,
)
from worker.tasks.base import BatchTask, Document, Task, get_task, register_task, task_names

__all__ = ["BatchTask", "Document", "Task", "get_task", "register_task", "task_names"]
