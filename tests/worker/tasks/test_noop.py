"""noop reports the document's length and nothing else."""
import pytest

from core.task_specs import validate_options
from worker.tasks import get_task


@pytest.mark.parametrize("subject", ["wal", "bread"])
def test_noop_counts_characters(make_document, texts, subject):
    text = texts[subject]
    assert get_task("noop").process(make_document(text), validate_options("noop", {})) == {"chars": len(text)}
