"""benchmarks/timeline.py, the parts that run without a GPU: the records' layout read from the kernel's header, and
the phases, per-tile and fixed costs and launch edges of known records."""

import pytest

TILE, LOOP_FIXED, Q_WAIT, FIRST_QK, EPILOGUE, GAP = 50, 20, 100, 300, 400, 30


@pytest.fixture(scope="module")
def sizes(timeline_bench):
    return timeline_bench.layout()


def info(w, tiles, segment=False):
    return w << 32 | tiles | (1 << 31 if segment else 0)


def put_item(words, sizes, index, clocks, w, tiles, segment=False):
    base = sizes["HEADER"] + index * sizes["EVENTS"]
    words[base:base + 6] = [*clocks, info(w, tiles, segment)]


def consumer_items(words, sizes, start, tile_counts, w0):
    """Consumer items back to back from clock `start`, each with the phases above; returns the clock after them."""
    top = start
    for index, tiles in enumerate(tile_counts):
        q = top + Q_WAIT
        first = q + FIRST_QK
        loop = first + LOOP_FIXED + tiles * TILE
        end = loop + EPILOGUE
        put_item(words, sizes, index, [top, q, first, loop, end], w0 + index, tiles, segment=tiles < 10)
        top = end + GAP
    return top


def records_of(sizes, ctas=2):
    records = [[[0] * sizes["WORDS"] for _ in range(sizes["ROLES"])] for _ in range(ctas)]
    for cta in range(ctas):
        # producers: start at 1000 / 1500 ns, end at 11000 / 9000 ns, at 1980 MHz
        start_ns, end_ns = (1000, 11000) if cta == 0 else (1500, 9000)
        records[cta][0][:5] = [start_ns, 5000, end_ns, 5000 + (end_ns - start_ns) * 198 // 100, 7 + cta]
        put_item(records[cta][0], sizes, 0, [6000, 6010, 6100, 7000, 0], cta, 10)
        put_item(records[cta][0], sizes, 1, [7100, 7110, 7200, 8000, 0], cta + 2, 4)
        for role in (1, 2):
            consumer_items(records[cta][role], sizes, 10_000 * (cta + 1), [10, 10, 4], cta)
    # an idle warpgroup's item (no key tiles) after CTA 1's consumer 2's three: left out of the phases
    put_item(records[1][2], sizes, 3, [1, 2, 0, 0, 3], 9, 0)
    return records


def test_layout_is_read_from_the_kernels_header(timeline_bench, sizes):
    assert sizes["WORDS"] == sizes["HEADER"] + sizes["ITEMS"] * sizes["EVENTS"]
    assert sizes["EVENTS"] == len(timeline_bench.EVENTS) and sizes["HEADER"] == 5
    with pytest.raises(ValueError, match="TIMELINE_ITEMS"):
        timeline_bench.layout("constexpr int TIMELINE_ROLES = 4;\nconstexpr int TIMELINE_HEADER = 4;\n"
                              "constexpr int TIMELINE_EVENTS = 6;\n")


def test_work_items_decode_clocks_index_tiles_and_segments(timeline_bench, sizes):
    items = timeline_bench.work_items(records_of(sizes), sizes)
    consumer = [i for i in items if i["cta"] == 0 and i["role"] == 1]
    assert [i["tiles"] for i in consumer] == [10, 10, 4]
    assert [i["segment"] for i in consumer] == [False, False, True]
    assert [i["w"] for i in consumer] == [0, 1, 2]
    assert consumer[0]["q"] - consumer[0]["top"] == Q_WAIT
    assert len(items) == 2 * (2 + 2 * 3) + 1


def test_consumer_phases_per_tile_and_fixed_cost(timeline_bench, sizes):
    result = timeline_bench.summarize(records_of(sizes), sizes)["consumers"]
    assert result["items"] == 2 * 2 * 3  # the idle item is left out
    assert (result["q_wait"], result["first_qk"], result["epilogue"], result["gap"]) == (Q_WAIT, FIRST_QK, EPILOGUE,
                                                                                          GAP)
    assert result["loop"] == LOOP_FIXED + 10 * TILE
    assert result["per_tile"] == pytest.approx(TILE)  # the slope over items of 10 and 4 key tiles
    period = Q_WAIT + FIRST_QK + LOOP_FIXED + 10 * TILE + EPILOGUE + GAP
    assert result["fixed_tiles"] == pytest.approx((period - 10 * TILE) / TILE)


def test_producer_phases_have_no_epilogue(timeline_bench, sizes):
    result = timeline_bench.summarize(records_of(sizes), sizes)["producer"]
    assert result["epilogue"] is None
    assert (result["q_wait"], result["first_qk"], result["items"]) == (10, 90, 4)
    assert result["gap"] == 7100 - 7000  # from the last copy issued to the next item's top


def test_launch_edges_clock_spread_and_tail_idle(timeline_bench, sizes):
    edges = timeline_bench.summarize(records_of(sizes), sizes)["launch"]
    assert edges["ctas"] == 2
    assert edges["sm_mhz"] == pytest.approx(1980, rel=1e-3)
    assert edges["span_us"] == pytest.approx(10.0)
    assert edges["start_spread_us"] == pytest.approx(0.5) and edges["end_spread_us"] == pytest.approx(2.0)
    assert edges["tail_idle"] == pytest.approx(2000 / (2 * 10000))
    first, second = edges["per_cta"]
    assert (first["sm"], first["start_us"], first["end_us"]) == (7, 0.0, 10.0)
    assert (second["sm"], second["start_us"], second["end_us"]) == (8, 0.5, 8.0)
    assert (first["items"], first["key_tiles"]) == (2, 14)
    assert first["loop_us_per_tile"] == pytest.approx((3 * LOOP_FIXED + 24 * TILE) / 24 / 1980, rel=1e-3)
    empty = [[[0] * sizes["WORDS"] for _ in range(sizes["ROLES"])]]
    with pytest.raises(ValueError, match="no CTA"):
        timeline_bench.launch_edges(empty, [])
