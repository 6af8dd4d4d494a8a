"""Builds the binary examples (examples/*.pdf, examples/*.docx) from the Markdown in scripts/example_sources/.

Run `.venv/bin/python scripts/make_examples.py`; the outputs are committed so the quick start needs no build.
`text_pdf` is a small PDF writer (Helvetica, word-wrapped, paginated) whose text any PDF reader extracts back.
"""
from __future__ import annotations

import datetime
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "scripts" / "example_sources"
EXAMPLES = ROOT / "examples"
# Which source becomes which binary example.
OUTPUTS = {"lithium-ion-batteries.md": "lithium-ion-batteries.pdf", "raft-consensus.md": "raft-consensus.docx"}

PAGE_WIDTH, PAGE_HEIGHT = 612, 792
MARGIN = 72
LEADING = 14
CHARS_PER_LINE = 90


def text_pdf(blocks: list[tuple[str, str]]) -> bytes:
    """Return the bytes of a PDF laying out `blocks`, each ("heading" | "paragraph", text), on Letter pages."""
    lines: list[tuple[str, str]] = []
    for kind, text in blocks:
        if kind not in ("heading", "paragraph"):
            raise ValueError(f"blocks: unknown kind {kind!r}")
        font = "F2" if kind == "heading" else "F1"
        lines.extend((font, line) for line in textwrap.wrap(text, CHARS_PER_LINE))
        lines.append(("F1", ""))
    per_page = (PAGE_HEIGHT - 2 * MARGIN) // LEADING
    pages = [lines[start:start + per_page] for start in range(0, len(lines), per_page)] or [[]]

    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",  # the page tree, filled in once the page objects are numbered
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold /Encoding /WinAnsiEncoding >>",
    ]
    page_ids = []
    for page in pages:
        content = _page_content(page)
        objects.append(b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Resources << /Font << /F1 3 0 R /F2 4 0 R >> >>"
            b" /Contents %d 0 R >>" % (PAGE_WIDTH, PAGE_HEIGHT, len(objects))
        )
        page_ids.append(len(objects))
    kids = b" ".join(b"%d 0 R" % number for number in page_ids)
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(page_ids))

    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref_at = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref_at)
    return bytes(out)


def _page_content(lines: list[tuple[str, str]]) -> bytes:
    parts = [b"BT %d TL %d %d Td" % (LEADING, MARGIN, PAGE_HEIGHT - MARGIN)]
    for font, line in lines:
        parts.append(b"/%s 11 Tf (%s) Tj T*" % (font.encode(), _pdf_string(line)))
    parts.append(b"ET")
    return b"\n".join(parts)


def _pdf_string(text: str) -> bytes:
    encoded = text.encode("cp1252", errors="replace")
    return encoded.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def markdown_blocks(markdown: str) -> list[tuple[int, str]]:
    """(heading level, text) per block of simple Markdown: level 1-6 for `#` headings, 0 for paragraphs."""
    blocks = []
    for block in markdown.split("\n\n"):
        block = " ".join(block.split())
        if not block:
            continue
        level = len(block) - len(block.lstrip("#"))
        blocks.append((level, block[level:].strip()) if 0 < level <= 6 else (0, block))
    return blocks


def docx_bytes(blocks: list[tuple[int, str]]) -> bytes:
    """Return a .docx with a Word heading per heading block and a paragraph per paragraph block."""
    import io

    import docx

    document = docx.Document()
    fixed = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    document.core_properties.created = document.core_properties.modified = fixed
    for level, text in blocks:
        if level:
            document.add_heading(text, level=level - 1)
        else:
            document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def main() -> None:
    """Write each example in OUTPUTS from its source."""
    for source, output in OUTPUTS.items():
        blocks = markdown_blocks((SOURCES / source).read_text(encoding="utf-8"))
        target = EXAMPLES / output
        if target.suffix == ".pdf":
            data = text_pdf([("heading" if level else "paragraph", text) for level, text in blocks])
        else:
            data = docx_bytes(blocks)
        target.write_bytes(data)
        print(f"{target.relative_to(ROOT)}: {len(data)} bytes")


if __name__ == "__main__":
    main()
