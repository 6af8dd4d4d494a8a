"""A rule-based sentence splitter that keeps character offsets.

Paragraphs (blank lines), headings, list items and table rows are separate blocks; inside a block a sentence
ends at `.`, `!`, `?` or `…` (plus closing quotes/brackets) followed by space and a character that can start a
sentence, unless the period ends a known abbreviation or an initial.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# Abbreviations after which a period rarely ends the sentence (without the final period): titles and
# references only when capitalized ("Ms." but not the unit "ms."), the others in any case.
CAPITALIZED_ABBREVIATIONS = frozenset(
    """Mr Mrs Ms Dr Prof Sr Jr St Mt Rev Gen Col Lt Sgt Capt Gov Sen Rep Pres Messrs No Nos Vol Vols Fig Figs
    Eq Eqs Ch Chap Sec Sect Art Ref Refs Dept Univ Inc Ltd Corp Co Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov
    Dec U.S U.K E.U Ph.D""".split()
)
ANY_CASE_ABBREVIATIONS = frozenset("e.g i.e cf vs viz al approx ca pp fig figs eq eqs ref refs".split())

_BLOCK = re.compile(r"\S.*?(?=\n[ \t]*\n|\Z)", re.S)
_LINE_MARKER = re.compile(r"[ \t]*(?:#{1,6}[ \t]+|[-*+•][ \t]+|\d{1,3}[.)][ \t]+|>[ \t]*)")
_TABLE_ROW = re.compile(r"^\s*\||\s\|\s")
_END = re.compile(r"(?:[.!?]+|…)[\"'”’)\]]*(?=\s)")
_INITIAL = re.compile(r"[A-Z]\.")
_ENDS_WITH_PUNCTUATION = re.compile(r"[.!?…:;,][\"'”’)\]]*\s*$")
_FINISHED_LINE = re.compile(r"[.!?…:][\"'”’)\]]*\s*$")
MAX_TITLE_WORDS = 10
TITLE_WIDTH_SHARE = 0.7
_SENTENCE_START = re.compile(r"[\"'“‘(\[]*[A-Z0-9À-ÖØ-Þ]")


@dataclass(frozen=True)
class Sentence:
    """One sentence: `text[start:end]` of the source, and `text` with its whitespace collapsed."""

    start: int
    end: int
    text: str


def split_sentences(text: str) -> list[Sentence]:
    """Split `text` into sentences, in order, with their character offsets in `text`."""
    sentences: list[Sentence] = []
    for block_start, block_end in _blocks(text):
        start = block_start
        for match in _END.finditer(text, block_start, block_end):
            if _ends_sentence(text, match, block_start, block_end):
                sentences.extend(_sentence(text, start, match.end()))
                start = match.end()
        sentences.extend(_sentence(text, start, block_end))
    return sentences


def _blocks(text: str) -> list[tuple[int, int]]:
    """Spans of paragraphs, cut before and after each heading, list item, table row or title line."""
    spans = []
    for paragraph in _BLOCK.finditer(text):
        start = paragraph.start()
        offset = start
        lines = paragraph.group().split("\n")
        longest = max(len(line.strip()) for line in lines)
        after_sentence = True
        for number, line in enumerate(lines):
            line_start, line_end = offset, offset + len(line)
            offset = line_end + 1
            marker = _LINE_MARKER.match(line)
            title = after_sentence and _is_title_line(line, number + 1 < len(lines), longest)
            after_sentence = title or _FINISHED_LINE.search(line) is not None
            separate = marker is not None or title or _TABLE_ROW.search(line) is not None
            if separate and line_start > start:
                spans.append((start, line_start - 1))
                start = line_start
            if marker is not None:
                start = line_start + marker.end()
            if separate or line.lstrip().startswith("#"):
                spans.append((start, line_end))
                start = line_end + 1
        if start < paragraph.end():
            spans.append((start, paragraph.end()))
    return spans


def _is_title_line(line: str, more_follows: bool, longest: int) -> bool:
    """Whether `line`, which opens a paragraph or follows a finished sentence or a title, is a heading without
    markup, as text extracted from a PDF has them: short, capitalized, unpunctuated, with more text after it.
    Lines of wrapped prose fill most of the width, so only lines well short of the paragraph's longest count."""
    words = line.split()
    return (
        more_follows
        and 0 < len(words) <= MAX_TITLE_WORDS
        and len(line.strip()) <= TITLE_WIDTH_SHARE * longest
        and words[0][0].isupper()
        and not _ENDS_WITH_PUNCTUATION.search(line)
    )


def _ends_sentence(text: str, match: re.Match, block_start: int, block_end: int) -> bool:
    following = text[match.end():block_end].lstrip()
    if not following:
        return True
    if not _SENTENCE_START.match(following):
        return False
    if match.group().rstrip("\"'”’)]") != ".":
        return True
    before = text[max(block_start, match.start() - 64):match.start()].split()
    token = before[-1].lstrip("([\"'“‘") if before else ""
    previous = before[-2] if len(before) > 1 else ""
    if token in CAPITALIZED_ABBREVIATIONS or token.lower() in ANY_CASE_ABBREVIATIONS:
        return False
    if token.isdigit() and len(before) == 1 and not text[block_start:match.start() - len(token)].strip():
        return False
    if len(token) == 1 and token.isupper():
        # "J. R. Lee", "John F. Kennedy": an initial sits next to another initial or a capitalized name;
        # "multiplied by V. Then" ends a sentence.
        return not (_INITIAL.fullmatch(following.split(maxsplit=1)[0]) or previous[:1].isupper())
    return True


def _sentence(text: str, start: int, end: int) -> list[Sentence]:
    span = text[start:end]
    stripped = span.strip()
    if not stripped:
        return []
    start += len(span) - len(span.lstrip())
    return [Sentence(start, start + len(stripped), " ".join(stripped.split()))]
