"""benchmarks/host_overhead.py, the parts that run without a GPU: its timing loop, profile and plot."""

import time


def test_host_time_counts_each_call_and_the_wait_after_the_last(host):
    waited = []
    host_us, until_done_us = host.host_and_gpu_us(lambda: time.sleep(0.001), 10,
                                                  synchronize=lambda: (waited.append(1), time.sleep(0.02)))
    assert len(waited) == 2  # after the warm-up, and after the timed calls
    assert 1000 <= host_us < until_done_us  # the second wait (20 ms over 10 calls) counts only until done
    assert until_done_us >= host_us + 2000


def test_profile_names_the_functions_called(host):
    def attention_call():
        return sum(range(100))

    report = host.profile(attention_call, 5)
    assert "attention_call" in report and "5 " in report


def test_plot_writes_a_png_of_every_case(host, tmp_path):
    rows = [{"impl": impl, "case": case, "host_us": us} for case in ("64q/4096k d64", "512q/4096k d128")
            for impl, us in (("fa3fp8", 120.0), ("sdpa-flash", 30.0))]
    host.plot(rows, tmp_path / "host.png")
    assert (tmp_path / "host.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_median_rounds_take_the_runners_in_turn_and_keep_each_ones_median(host):
    order, syncs = [], []

    def a():  # 4 ms a call in the first round's timed calls (after the first wait), else 1 ms
        order.append("a")
        time.sleep(0.004 if len(syncs) == 1 else 0.001)

    def b():
        order.append("b")
        time.sleep(0.002)

    medians = host.median_rounds({"a": a, "b": b}, 2, 3, synchronize=lambda: syncs.append(1))
    calls = host.WARMUP + 2  # each round: a's warm-up and timed calls, then b's
    assert order == (["a"] * calls + ["b"] * calls) * 3
    assert 1000 <= medians["a"][0] < 2500  # the slow round is not the median
    assert 2000 <= medians["b"][0] <= medians["b"][1]
