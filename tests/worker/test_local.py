"""Local mode: a folder of real documents through the task code in this process, files in the service's formats."""
from __future__ import annotations

import json
from pathlib import Path

import docx
import pytest

from core.settings import Settings
from worker.local import run_local

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TEXT = "Local mode reads a folder. It runs the same task code as the worker. It writes the same files."


@pytest.fixture
def settings() -> Settings:
    return Settings(_env_file=None, pack_token_budget=200)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder with one document of each kind, some of them bad."""
    root = tmp_path / "in"
    (root / "nested").mkdir(parents=True)
    (root / "plain.txt").write_text(TEXT)
    (root / "latin1.txt").write_bytes("Ça coûte 5 €. Voilà.".encode("cp1252"))
    (root / "page.html").write_text(f"<html><head><style>p{{}}</style></head><body><p>{TEXT}</p>"
                                    "<script>alert(1)</script></body></html>")
    (root / "nested" / "notes.md").write_text(f"# Notes\n\n{TEXT}\n")
    word = docx.Document()
    word.add_paragraph(TEXT)
    word.save(root / "memo.docx")
    (root / "corrupt.pdf").write_bytes(b"%PDF-1.4\nthis is not a pdf body")
    (root / "junk.txt").write_bytes(bytes(range(256)) * 4)
    (root / "batch.jsonl").write_text('{"id": "row-1", "text": "A row."}\n{"id": "row-2"}\n')
    (root / "ignored.png").write_bytes(b"\x89PNG")
    return root


def test_a_folder_runs_to_results_errors_and_manifest(folder: Path, tmp_path: Path, settings: Settings) -> None:
    out = tmp_path / "out"
    manifest = run_local(folder, "stats", out, {}, settings, progress=False)
    results = {r["id"]: r["result"] for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    errors = {e["id"]: e["error"] for e in map(json.loads, (out / "errors.jsonl").read_text().splitlines())}
    assert set(results) == {"plain.txt", "latin1.txt", "page.html", "nested/notes.md", "memo.docx", "row-1"}
    assert set(errors) == {"corrupt.pdf", "junk.txt", "row-2"}
    assert results["plain.txt"]["sentences"] == 3
    assert results["latin1.txt"]["characters"] == len("Ça coûte 5 €. Voilà.")
    assert results["page.html"]["words"] == results["plain.txt"]["words"]
    assert "'text' must be a string" in errors["row-2"]
    assert manifest == json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "partially_succeeded"
    assert manifest["counts"] == {"total": 9, "succeeded": 6, "failed": 3, "cancelled": 0}
    assert manifest["task"] == "stats" and manifest["options"] == {"tokenizer": "encoder"}
    assert len(list((out / "docs").glob("*.json"))) == 9


def test_the_shipped_examples_all_succeed(tmp_path: Path, settings: Settings) -> None:
    manifest = run_local(EXAMPLES, "noop", tmp_path / "out", {}, settings, progress=False)
    assert manifest["status"] == "succeeded"
    assert manifest["counts"]["succeeded"] == manifest["counts"]["total"] >= 5
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    files = [r for r in results if Path(r["id"]).suffix in (".html", ".pdf", ".docx", ".txt", ".md")]
    assert len(files) >= 5 and all(r["result"]["chars"] > 10_000 for r in files)


@pytest.mark.parametrize(
    ("folder_name", "task", "options", "message"),
    [
        ("missing", "stats", {}, "does not exist"),
        ("empty", "stats", {}, "no documents"),
        ("in", "translate", {}, "unknown task 'translate'"),
        ("in", "summarize", {"sentences": "many"}, "options.sentences"),
    ],
    ids=["missing-folder", "empty-folder", "unknown-task", "bad-option"],
)
def test_bad_arguments_raise_value_errors_naming_them(tmp_path: Path, folder: Path, settings: Settings,
                                                      folder_name: str, task: str, options: dict, message: str) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=message):
        run_local(tmp_path / folder_name, task, tmp_path / "out", options, settings, progress=False)
