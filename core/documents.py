"""Turning uploaded files into plain text: one function per format, and JSONL batches of documents.

Torch-free: the API calls this to reject bad input early, the worker and the CLI to read documents.
"""
from __future__ import annotations

import codecs
import io
import json
import re
import zipfile
from pathlib import PurePosixPath

import charset_normalizer
from bs4 import BeautifulSoup

SUPPORTED_SUFFIXES = (".txt", ".md", ".html", ".htm", ".pdf", ".docx")
JSONL_SUFFIX = ".jsonl"
MAX_DOC_ID_CHARS = 200

# Share of control characters above which decoded "text" is treated as binary data.
_MAX_CONTROL_SHARE = 0.01
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
_BAD_ID_CHARS = re.compile(r"[\x00-\x1f\x7f/\\]")
# A .docx may inflate this many times its upload size before it counts as a zip bomb.
_MAX_DOCX_INFLATION = 30
_DROPPED_HTML_TAGS = ("script", "style", "noscript", "template", "svg", "head", "nav")
_BLOCK_HTML_TAGS = (
    "address", "article", "aside", "blockquote", "dd", "div", "dl", "dt", "figcaption", "figure", "footer",
    "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section",
    "table", "tr", "ul", "caption",
)
_CELL_HTML_TAGS = ("td", "th")


class DocumentError(ValueError):
    """A failure of one document (unreadable, empty, too large, ...); the job goes on with the others.

    The message names the document; it is written to the job's errors.jsonl. `doc_id` is set when the
    document's id is known.
    """

    def __init__(self, message: str, doc_id: str | None = None):
        super().__init__(message)
        self.doc_id = doc_id

    def __reduce__(self):
        return (type(self), (str(self), self.doc_id))


def extract_text(name: str, data: bytes, max_bytes: int) -> str:
    """Return the plain text of the document `name` (its suffix picks the format) from its raw bytes.

    Raises DocumentError when the document is over `max_bytes`, of an unsupported type, corrupt, binary
    data, or holds no text.
    """
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    suffix = PurePosixPath(name).suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise DocumentError(
            f"{name}: unsupported file type {repr(suffix) if suffix else '(no suffix)'}; "
            f"supported: {', '.join(SUPPORTED_SUFFIXES)}"
        )
    if len(data) > max_bytes:
        raise DocumentError(f"{name}: {len(data)} bytes is over the limit of {max_bytes} bytes")
    if not data.strip():
        raise DocumentError(f"{name}: the document is empty")
    if suffix == ".pdf":
        text = _pdf_text(name, data)
    elif suffix == ".docx":
        text = _docx_text(name, data)
    elif suffix in (".html", ".htm"):
        text = _html_text(name, data)
    else:
        text = decode_text(name, data)
    text = _tidy(text)
    if not text:
        raise DocumentError(f"{name}: no text found in the document")
    return text


def parse_jsonl(data: bytes, max_bytes: int) -> list[tuple[str, str] | DocumentError]:
    """Parse JSON Lines with one document per line ({"id": ..., "text": ...}); blank lines are skipped.

    Returns one entry per document line, in order: `(id, text)`, or a DocumentError naming the line for a
    bad line (invalid JSON, missing or bad id/text, duplicate id, text over `max_bytes`).
    """
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    results: list[tuple[str, str] | DocumentError] = []
    seen: set[str] = set()
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            doc_id, text = _jsonl_document(number, raw, max_bytes)
        except DocumentError as exc:
            results.append(exc)
            continue
        if doc_id in seen:
            results.append(DocumentError(f"line {number}: duplicate document id {doc_id!r}", doc_id))
            continue
        seen.add(doc_id)
        results.append((doc_id, text))
    return results


def decode_text(name: str, data: bytes) -> str:
    """Decode text bytes: a BOM or valid UTF-8 first, else the encoding charset-normalizer detects.

    Raises DocumentError for binary data (NUL bytes, control characters, no plausible encoding).
    """
    for bom, encoding in (
        (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")
    ):
        if data.startswith(bom):
            try:
                return _refuse_binary(name, data.decode(encoding))
            except UnicodeDecodeError as exc:
                raise DocumentError(f"{name}: invalid {encoding} text ({exc.reason})") from exc
    if b"\x00" in data:
        raise DocumentError(f"{name}: binary data, not text (contains NUL bytes)")
    try:
        return _refuse_binary(name, data.decode("utf-8"))
    except UnicodeDecodeError:
        pass
    best = charset_normalizer.from_bytes(data).best()
    if best is None:
        raise DocumentError(f"{name}: binary data or unknown text encoding")
    return _refuse_binary(name, str(best))


def _refuse_binary(name: str, text: str) -> str:
    controls = len(_CONTROL_CHARS.findall(text))
    if controls > _MAX_CONTROL_SHARE * max(len(text), 1):
        raise DocumentError(f"{name}: binary data, not text ({controls} control characters)")
    return text


def _pdf_text(name: str, data: bytes) -> str:
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            raise DocumentError(f"{name}: the PDF is encrypted with a password")
        pages = [page.extract_text() or "" for page in reader.pages]
    except DocumentError:
        raise
    except Exception as exc:  # a parser fed untrusted bytes fails in many ways; each is this document's failure
        raise DocumentError(f"{name}: not a readable PDF ({type(exc).__name__}: {exc})") from exc
    if not any(page.strip() for page in pages):
        raise DocumentError(f"{name}: the PDF has no text layer (scanned pages need OCR first)")
    # A page break usually falls inside a paragraph, so pages are joined as lines, not as paragraphs.
    return "\n".join(page.strip("\n") for page in pages)


def _docx_text(name: str, data: bytes) -> str:
    import docx
    from docx.table import Table

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            inflated = sum(info.file_size for info in archive.infolist())
        if inflated > _MAX_DOCX_INFLATION * len(data) + 10_000_000:
            raise DocumentError(f"{name}: the .docx inflates to {inflated} bytes; refused as a zip bomb")
        document = docx.Document(io.BytesIO(data))
        blocks = []
        for block in document.iter_inner_content():
            if isinstance(block, Table):
                blocks.extend(" | ".join(cell.text for cell in row.cells) for row in block.rows)
            else:
                blocks.append(block.text)
    except DocumentError:
        raise
    except Exception as exc:  # as for PDFs: any failure to parse untrusted bytes is this document's failure
        raise DocumentError(f"{name}: not a readable .docx file ({type(exc).__name__}: {exc})") from exc
    return "\n\n".join(blocks)


def _html_text(name: str, data: bytes) -> str:
    if b"\x00" in data and not data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise DocumentError(f"{name}: binary data, not HTML (contains NUL bytes)")
    soup = BeautifulSoup(data, "html.parser")
    for tag in soup(_DROPPED_HTML_TAGS):
        tag.decompose()
    for br in soup("br"):
        br.replace_with("\n")
    for tag in soup(_BLOCK_HTML_TAGS):
        tag.insert_before("\n\n")
        tag.insert_after("\n\n")
    for tag in soup(_CELL_HTML_TAGS):
        if tag.find_previous_sibling(_CELL_HTML_TAGS):
            tag.insert_before(" | ")
    return _refuse_binary(name, soup.get_text())


def _tidy(text: str) -> str:
    """Normalize newlines, trim each line's trailing space and collapse runs of blank lines."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x0c", "\n")
    lines = [re.sub(r"[ \t\u00a0]+", " ", line).strip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _check_doc_id(doc_id: str) -> None:
    if not doc_id or doc_id.strip() != doc_id or doc_id.startswith(".") or len(doc_id) > MAX_DOC_ID_CHARS:
        raise DocumentError(
            f"bad document id {doc_id!r}: must be 1-{MAX_DOC_ID_CHARS} characters, "
            "not start with '.' nor start or end with spaces"
        )
    if _BAD_ID_CHARS.search(doc_id):
        raise DocumentError(f"bad document id {doc_id!r}: must not contain '/', '\\' or control characters")


def _jsonl_document(number: int, raw: bytes, max_bytes: int) -> tuple[str, str]:
    try:
        record = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DocumentError(f"line {number}: not valid JSON ({exc})") from exc
    if not isinstance(record, dict):
        raise DocumentError(f"line {number}: expected a JSON object with 'id' and 'text'")
    doc_id = record.get("id")
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)
    if not isinstance(doc_id, str):
        raise DocumentError(f"line {number}: 'id' must be a string")
    try:
        _check_doc_id(doc_id)
    except DocumentError as exc:
        raise DocumentError(f"line {number}: {exc}") from exc
    text = record.get("text")
    if not isinstance(text, str):
        raise DocumentError(f"line {number} (id {doc_id!r}): 'text' must be a string", doc_id)
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise DocumentError(
            f"line {number} (id {doc_id!r}): text of {size} bytes is over the limit of {max_bytes} bytes", doc_id
        )
    text = _tidy(text)
    if not text:
        raise DocumentError(f"line {number} (id {doc_id!r}): 'text' is empty", doc_id)
    return doc_id, text
