"""Text extraction for every supported format, and the clear per-document errors for bad input."""
import importlib.util
import io
import json
import os
import pickle
import random
import zipfile
from pathlib import Path

import docx
import pytest

from core.documents import SUPPORTED_SUFFIXES, DocumentError, extract_text, parse_jsonl

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 1_000_000

PROSE = (
    "Write-ahead logging lets a database recover after a crash. Every change is first appended to a log "
    "and flushed to stable storage; only then may the modified page be written back. During recovery the "
    "log is replayed from the last checkpoint."
)
FRENCH = (
    "Le café de la gare était fermé à cause de la grève. Les employés réclamaient une hausse de salaire "
    "et de meilleures conditions, notamment pour les équipes de nuit. Naïveté ou stratégie, la direction "
    "n'a pas répondu avant l'été."
)


def _load_generator():
    spec = importlib.util.spec_from_file_location("make_examples", ROOT / "scripts" / "make_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


text_pdf = _load_generator().text_pdf


def _docx_bytes(blocks):
    """A .docx with a heading, then each block: a paragraph (str) or a table (list of rows)."""
    document = docx.Document()
    document.add_heading("Recovery", level=1)
    for block in blocks:
        if isinstance(block, str):
            document.add_paragraph(block)
            continue
        grid = document.add_table(rows=len(block), cols=len(block[0]))
        for row, values in zip(grid.rows, block):
            for cell, value in zip(row.cells, values):
                cell.text = value
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "name, data",
    [
        pytest.param("notes.txt", PROSE.encode("utf-8"), id="txt-utf8"),
        pytest.param("notes.md", f"# Recovery\n\n{PROSE}\n".encode("utf-8"), id="md"),
        pytest.param("NOTES.TXT", b"\xef\xbb\xbf" + PROSE.encode("utf-8"), id="txt-bom-upper-suffix"),
        pytest.param("notes.txt", PROSE.encode("utf-16"), id="txt-utf16"),
        pytest.param(
            "page.html",
            f"<html><head><title>t</title><style>p {{color: red}}</style></head><body><script>var x = 1;</script>"
            f"<p>{PROSE}</p></body></html>".encode("utf-8"),
            id="html",
        ),
        pytest.param("page.htm", f"<div>{PROSE}</div>".encode("utf-8"), id="htm"),
        pytest.param("paper.pdf", text_pdf([("heading", "Recovery"), ("paragraph", PROSE)]), id="pdf"),
        pytest.param("report.docx", _docx_bytes([PROSE]), id="docx"),
    ],
)
def test_extracts_the_text_of_each_format(name, data):
    text = extract_text(name, data, LIMIT)
    assert " ".join(text.split()).endswith(PROSE) or PROSE in " ".join(text.split())
    assert "color: red" not in text and "var x" not in text


@pytest.mark.parametrize("encoding", ["cp1252", "latin-1"], ids=["cp1252", "latin-1"])
def test_detects_legacy_encodings(encoding):
    text = extract_text("lettre.txt", (FRENCH * 3).encode(encoding), LIMIT)
    assert "café" in text and "grève" in text and "Naïveté" in text and "l'été" in text


def test_html_blocks_become_paragraphs_and_inline_tags_stay_in_line():
    html = (
        b"<h1>Caches</h1><p>A <b>write-back</b> cache delays writes.</p><ul><li>L1</li><li>L2</li></ul><br>"
        b"<table><tr><th>Level</th><th>Latency</th></tr><tr><td>L1</td><td>1 ns</td></tr></table>"
    )
    assert extract_text("c.html", html, LIMIT) == (
        "Caches\n\nA write-back cache delays writes.\n\nL1\n\nL2\n\nLevel | Latency\n\nL1 | 1 ns"
    )


def test_html_honours_the_declared_charset():
    html = f'<html><head><meta charset="windows-1252"></head><body><p>{FRENCH}</p></body></html>'
    assert "grève" in extract_text("f.html", html.encode("cp1252"), LIMIT)


def test_docx_keeps_tables_in_document_order():
    data = _docx_bytes(["Before the table.", [["Level", "Latency"], ["L1", "1 ns"]], "After the table."])
    text = extract_text("t.docx", data, LIMIT)
    assert text.index("Before the table.") < text.index("L1 | 1 ns") < text.index("After the table.")


def test_pdf_keeps_pages_in_order():
    blocks = [("paragraph", f"Section {n} discusses the replay of log record number {n}.") for n in range(80)]
    text = extract_text("long.pdf", text_pdf(blocks), LIMIT)
    positions = [text.index(f"log record number {n}.") for n in range(80)]
    assert positions == sorted(positions)


def _encrypted_pdf() -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(text_pdf([("paragraph", PROSE)]))))
    writer.encrypt("secret", algorithm="RC4-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def _zip_with(member: str, payload: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(member, payload)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "name, data, message",
    [
        pytest.param("scan.pdf", b"%PDF-1.4\n1 0 obj <<\nthis is not a pdf", "not a readable PDF", id="corrupt-pdf"),
        pytest.param("scan.pdf", text_pdf([]), "no text layer", id="pdf-without-text"),
        pytest.param("locked.pdf", _encrypted_pdf(), "encrypted with a password", id="encrypted-pdf"),
        pytest.param("blob.docx", os.urandom(3000), "not a readable .docx", id="docx-not-a-zip"),
        pytest.param("blob.docx", _zip_with("hello.txt", b"hi"), "not a readable .docx", id="docx-wrong-zip"),
        pytest.param("bomb.docx", _zip_with("word/document.xml", b" " * 40_000_000), "zip bomb", id="docx-zip-bomb"),
        pytest.param("junk.txt", random.Random(7).randbytes(4000), "binary data", id="binary-junk"),
        pytest.param("junk.txt", b"MZ\x90\x00\x03\x00\x00\x00\x04\x00" * 50, "binary data", id="nul-bytes"),
        pytest.param("junk.html", b"<p>\x00\x01\x02</p>" * 50, "binary data", id="binary-html"),
        pytest.param("empty.txt", b"", "empty", id="empty"),
        pytest.param("blank.md", b" \n\t\n ", "empty", id="whitespace-only"),
        pytest.param("bare.html", b"<html><script>run()</script></html>", "no text", id="html-without-text"),
        pytest.param("image.png", b"\x89PNG\r\n\x1a\n", "unsupported file type '.png'", id="unsupported"),
        pytest.param("README", PROSE.encode(), r"unsupported file type \(no suffix\)", id="no-suffix"),
        pytest.param("big.txt", b"word " * 300_000, "over the limit of 1000000 bytes", id="oversize"),
    ],
)
def test_bad_documents_raise_a_clear_document_error(name, data, message):
    with pytest.raises(DocumentError, match=message) as caught:
        extract_text(name, data, LIMIT)
    assert str(caught.value).startswith(name)


def test_a_bad_limit_is_a_programming_error():
    with pytest.raises(ValueError, match="max_bytes"):
        extract_text("a.txt", b"text", 0)


def test_supported_suffixes_cover_the_extractors():
    assert set(SUPPORTED_SUFFIXES) == {".txt", ".md", ".html", ".htm", ".pdf", ".docx"}


def test_document_error_survives_pickling_with_its_id():
    error = pickle.loads(pickle.dumps(DocumentError("d1: broken", doc_id="d1")))
    assert (str(error), error.doc_id) == ("d1: broken", "d1")


def test_jsonl_keeps_good_lines_and_reports_each_bad_one():
    lines = [
        json.dumps({"id": "a", "text": PROSE}),
        "{not json",
        json.dumps({"id": "b"}),
        "",
        json.dumps({"text": "no id"}),
        json.dumps({"id": 7, "text": FRENCH}),
        json.dumps({"id": "a", "text": "again"}),
        json.dumps({"id": "big", "text": "x" * 600}),
        json.dumps(["a", "list"]),
        json.dumps({"id": "../escape", "text": "t"}),
        json.dumps({"id": "blank", "text": "  \n "}),
    ]
    results = parse_jsonl("\n".join(lines).encode("utf-8"), max_bytes=500)
    errors = [str(item) for item in results if isinstance(item, DocumentError)]
    assert [item for item in results if isinstance(item, tuple)] == [("a", PROSE), ("7", FRENCH)]
    assert len(results) == 10
    expected = [
        "line 2: not valid JSON",
        "line 3 (id 'b'): 'text' must be a string",
        "line 5: 'id' must be a string",
        "line 7: duplicate document id 'a'",
        "line 8 (id 'big'): text of 600 bytes is over the limit of 500 bytes",
        "line 9: expected a JSON object",
        "line 10: bad document id '../escape'",
        "line 11 (id 'blank'): 'text' is empty",
    ]
    for prefix in expected:
        assert any(error.startswith(prefix) for error in errors), prefix


def _mutations(data: bytes, seed: int, count: int):
    """Damaged copies of `data`: flipped bytes, truncations and cut-out spans."""
    rng = random.Random(seed)
    for index in range(count):
        damaged = bytearray(data)
        if index % 3 == 0:
            for _ in range(rng.randint(1, 20)):
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        elif index % 3 == 1:
            damaged = damaged[: rng.randrange(len(damaged))]
        else:
            start = rng.randrange(len(damaged))
            damaged[start:start + rng.randint(1, 500)] = b""
        yield bytes(damaged)


@pytest.mark.parametrize("example", ["lithium-ion-batteries.pdf", "raft-consensus.docx"])
def test_damaged_files_give_text_or_a_document_error(example):
    data = (ROOT / "examples" / example).read_bytes()
    outcomes = set()
    for damaged in _mutations(data, seed=3, count=60):
        try:
            extract_text(example, damaged, LIMIT)
            outcomes.add("text")
        except DocumentError as exc:
            assert str(exc).startswith(example)
            outcomes.add("error")
    assert "error" in outcomes
