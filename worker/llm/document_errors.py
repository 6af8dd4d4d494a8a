"""Per-document errors that name their document, as the job's errors.jsonl shows them."""
from collections.abc import Iterator
from contextlib import contextmanager

from core.documents import DocumentError


def naming(error: DocumentError, document_id: str) -> DocumentError:
    """`error` with the document's id in front of its message and as its doc_id."""
    return DocumentError(f"{document_id}: {error}", document_id)


@contextmanager
def about_document(document_id: str) -> Iterator[None]:
    """Re-raise a DocumentError from the block as one that names `document_id`."""
    try:
        yield
    except DocumentError as error:
        raise naming(error, document_id) from None
