"""Fixtures for the task tests: real prose on distinct subjects, and a Document factory."""
import pytest

from worker.tasks import Document

WAL = (
    "Write-ahead logging is how most databases survive a crash. Before a modified page may be written back to "
    "disk, the log records that describe the change must reach stable storage. If the machine fails, recovery "
    "reads the log from the last checkpoint, redoes the changes of committed transactions and undoes those of "
    "transactions that never committed. Checkpoints bound how much log must be replayed, so they trade a little "
    "steady-state write bandwidth for a shorter recovery time."
)
RECOVERY = (
    "After a power failure, a database engine restores consistency by replaying its transaction journal. Each "
    "update was appended to the journal and flushed before the data file changed, so the journal alone says "
    "which transactions finished. Replay starts from the most recent checkpoint and rolls back work that was "
    "still in flight when the server went down."
)
BREAD = (
    "A sourdough loaf starts with a starter of flour and water that wild yeast and lactic bacteria have colonised. "
    "The baker mixes the starter into the dough, lets it rise slowly for many hours, then shapes it and bakes it "
    "in a very hot oven. Steam in the first minutes keeps the crust soft long enough for the loaf to spring up, "
    "and the long fermentation gives the crumb its sour taste and open texture."
)
ATTENTION = (
    "FlashAttention computes exact attention without writing the full score matrix to GPU memory. It splits the "
    "queries, keys and values into tiles that fit in on-chip shared memory and keeps a running maximum and sum "
    "for the softmax of each row. Because the quadratic matrix never leaves the chip, the kernel is limited by "
    "arithmetic rather than by memory bandwidth, and long sequences become affordable."
)


@pytest.fixture
def make_document():
    """Build a Document with a readable id."""

    def make(text: str, doc_id: str = "doc") -> Document:
        return Document(id=doc_id, text=text, metadata={"source": "test"})

    return make


@pytest.fixture
def texts():
    """Prose by subject: two on crash recovery (related), one on bread and one on GPU attention (unrelated)."""
    return {"wal": WAL, "recovery": RECOVERY, "bread": BREAD, "attention": ATTENTION}


@pytest.fixture
def settings_without_llm(monkeypatch):
    """Settings as a worker without DOCFLASH_LLM_MODEL sees them."""
    from core.settings import get_settings

    monkeypatch.delenv("DOCFLASH_LLM_MODEL", raising=False)
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()
