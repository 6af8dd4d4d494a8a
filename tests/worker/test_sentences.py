"""The sentence splitter: abbreviations, numbers, quotes, markdown structure, and exact offsets."""
import time

import pytest

from worker.sentences import split_sentences


@pytest.mark.parametrize(
    "text, expected",
    [
        pytest.param("The log is flushed. Then the page is written!",
                     ["The log is flushed.", "Then the page is written!"], id="plain"),
        pytest.param("Dr. Rivera and Prof. Okafor agreed. It worked.",
                     ["Dr. Rivera and Prof. Okafor agreed.", "It worked."], id="titles"),
        pytest.param("Latency fell to 3.5 ms. Throughput rose by 2.0x.",
                     ["Latency fell to 3.5 ms.", "Throughput rose by 2.0x."], id="decimals"),
        pytest.param("Use a fast disk, e.g. an NVMe drive. Or not.",
                     ["Use a fast disk, e.g. an NVMe drive.", "Or not."], id="e.g."),
        pytest.param("Compare Fig. 3 with Eq. 2 first. Next, the table.",
                     ["Compare Fig. 3 with Eq. 2 first.", "Next, the table."], id="fig-eq"),
        pytest.param("J. R. Lee designed it. Smith et al. agreed.", ["J. R. Lee designed it.", "Smith et al. agreed."],
                     id="initials-et-al"),
        pytest.param("Multiply P by V. Then store it. John F. Kennedy spoke.",
                     ["Multiply P by V.", "Then store it.", "John F. Kennedy spoke."], id="variable-vs-initial"),
        pytest.param('He said "it is durable." Nobody objected.', ['He said "it is durable."', "Nobody objected."],
                     id="closing-quote"),
        pytest.param("Was it replayed? Yes... All of it.", ["Was it replayed?", "Yes...", "All of it."],
                     id="question-ellipsis"),
        pytest.param("The value is approx. three. done here.", ["The value is approx. three. done here."],
                     id="lowercase-next-word"),
        pytest.param("The first line of a wrapped paragraph\nends right here. Next one.",
                     ["The first line of a wrapped paragraph ends right here.", "Next one."], id="wrapped-lines"),
        pytest.param("Recovery\nReplay starts from the last checkpoint and\nrepeats history. Then undo runs.",
                     ["Recovery", "Replay starts from the last checkpoint and repeats history.", "Then undo runs."],
                     id="unmarked-title-line"),
        pytest.param("Report Title\nIntroduction\nThe engine flushes the log before the page.\nChapter Two\n"
                     "Replay starts from the last checkpoint and then\nUndo follows it.",
                     ["Report Title", "Introduction", "The engine flushes the log before the page.", "Chapter Two",
                      "Replay starts from the last checkpoint and then Undo follows it."], id="title-lines-in-a-row"),
        pytest.param("## 3. The write-ahead rule\n\n1. Numbered paragraph.", ["3. The write-ahead rule",
                     "Numbered paragraph."], id="section-number"),
        pytest.param("# Recovery\nReplay starts at the checkpoint.\n\n## Notes\n\nA second paragraph",
                     ["Recovery", "Replay starts at the checkpoint.", "Notes", "A second paragraph"],
                     id="markdown-headings"),
        pytest.param("Steps:\n- Flush the log\n- Write the page.\n1. Numbered step",
                     ["Steps:", "Flush the log", "Write the page.", "Numbered step"], id="list-items"),
        pytest.param("| Level | Latency |\n| L1 | 1 ns |", ["| Level | Latency |", "| L1 | 1 ns |"], id="table-rows"),
        pytest.param("", [], id="empty"),
        pytest.param(" \n\n \t", [], id="whitespace"),
    ],
)
def test_split(text, expected):
    assert [sentence.text for sentence in split_sentences(text)] == expected


def test_offsets_point_into_the_source():
    text = "  # Title\n\nFirst sentence here.  Second one\nwraps here!\n\n- item one.\n"
    sentences = split_sentences(text)
    assert [s.text for s in sentences] == ["Title", "First sentence here.", "Second one wraps here!", "item one."]
    for sentence in sentences:
        assert " ".join(text[sentence.start:sentence.end].split()) == sentence.text
    assert [s.start for s in sentences] == sorted(s.start for s in sentences)


def test_long_text_splits_in_linear_time():
    paragraph = "Dr. Lee measured 3.5 ms on the U.S. cluster, e.g. with J. R. Smith. It worked! Then it stopped. " * 20
    text = "\n\n".join([paragraph] * 1000)
    started = time.perf_counter()
    sentences = split_sentences(text)
    assert len(sentences) == 3 * 20 * 1000
    assert time.perf_counter() - started < 20
