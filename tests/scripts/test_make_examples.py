"""The committed examples: real length, readable in every format, and in step with their sources."""
import importlib.util
from pathlib import Path

import pytest

from core.documents import JSONL_SUFFIX, DocumentError, extract_text, parse_jsonl

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").iterdir())
LIMIT = 10_000_000


def _generator():
    spec = importlib.util.spec_from_file_location("make_examples", ROOT / "scripts" / "make_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_examples_cover_every_format_and_stay_small():
    assert {path.suffix for path in EXAMPLES} == {".md", ".html", ".txt", ".pdf", ".docx", ".jsonl"}
    assert sum(path.stat().st_size for path in EXAMPLES) < 1_000_000


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_each_example_reads_as_long_documents(path):
    if path.suffix == JSONL_SUFFIX:
        documents = parse_jsonl(path.read_bytes(), LIMIT)
        assert not [item for item in documents if isinstance(item, DocumentError)]
        assert len(documents) >= 5 and min(len(text.split()) for _, text in documents) >= 50
    else:
        assert len(extract_text(path.name, path.read_bytes(), LIMIT).split()) >= 2300


@pytest.mark.parametrize("source, output", list(_generator().OUTPUTS.items()), ids=lambda value: value)
def test_committed_binaries_match_their_sources(source, output):
    generator = _generator()
    blocks = generator.markdown_blocks((generator.SOURCES / source).read_text(encoding="utf-8"))
    if output.endswith(".pdf"):
        fresh = generator.text_pdf([("heading" if level else "paragraph", text) for level, text in blocks])
    else:
        fresh = generator.docx_bytes(blocks)
    committed = (ROOT / "examples" / output).read_bytes()
    assert extract_text(output, fresh, LIMIT) == extract_text(output, committed, LIMIT)
    assert blocks[0][0] == 1 and blocks[0][1] in extract_text(output, committed, LIMIT)


def test_markdown_blocks():
    assert _generator().markdown_blocks("# Title\n\nA wrapped\nparagraph.\n\n## Part\n\n\n") == [
        (1, "Title"), (0, "A wrapped paragraph."), (2, "Part")
    ]


def test_text_pdf_refuses_unknown_block_kinds():
    with pytest.raises(ValueError, match="unknown kind 'table'"):
        _generator().text_pdf([("table", "x")])


@pytest.mark.parametrize("source, output", list(_generator().OUTPUTS.items()), ids=lambda value: value)
def test_headings_of_the_binary_examples_split_as_their_own_sentences(source, output):
    from worker.sentences import split_sentences

    generator = _generator()
    headings = [text for level, text in generator.markdown_blocks((generator.SOURCES / source).read_text()) if level]
    text = extract_text(output, (ROOT / "examples" / output).read_bytes(), LIMIT)
    sentences = [sentence.text for sentence in split_sentences(text)]
    assert [sentence for sentence in sentences if sentence in headings] == headings
