"""benchmarks/kernel_ab.py, the parts that run without a GPU: the shapes and settings it times, the library swap,
the order of the runs, the comparison of outputs and the plot."""

import torch

from fa3fp8 import attention_sm90, cuda_build


def test_cases_are_the_public_defaults_of_every_cuda_shape(ab):
    cases = ab.cases([4096, 16384])
    assert {(fp8, d, causal, seqlen) for fp8, d, causal, seqlen, *_ in cases} == {
        (fp8, d, causal, seqlen) for fp8 in (False, True) for d in (128, 256) for causal in (False, True)
        for seqlen in (4096, 16384)
    }
    for fp8, d, causal, seqlen, batch, heads, settings in cases:
        assert batch * seqlen == 16384 and heads * d == 2048
        assert settings == attention_sm90.best_settings(d, fp8, causal, seqlen, equal_lengths=True)
        limit = attention_sm90.EQUAL_LENGTHS_FOLDS_MAX_KEYS.get((d, fp8), attention_sm90.SHORT_CAUSAL_MAX_KEYS)
        assert settings.get("fold", False) == (causal and seqlen <= limit)


def test_cases_keep_only_the_dtypes_and_head_dims_asked_for(ab):
    cases = ab.cases([4096], dtypes=["fp8"], dims=[64, 96, 256])  # no CUDA kernel at d96
    assert {(fp8, d, causal) for fp8, d, causal, *_ in cases} == {
        (True, d, c) for d in (64, 256) for c in (False, True)
    }


def test_causal_settings_time_the_causal_shapes_only_on_those_settings(ab):
    folds = {"loop": "serial", "consumers": 3, "fold": True}
    cases = ab.cases([2048, 4096], dtypes=["fp8"], dims=[128], causal_settings=folds)
    assert [(fp8, d, causal, seqlen) for fp8, d, causal, seqlen, *_ in cases] == [
        (True, 128, True, 2048), (True, 128, True, 4096)
    ]
    assert all(settings == folds for *_, settings in cases)
    # no settings given are the launcher's defaults, not the API's choice
    assert all(settings == {} for *_, settings in ab.cases([4096], dtypes=["fp8"], dims=[128], causal_settings={}))


def test_window_cases_are_causal_on_the_window_settings_and_shorter_than_the_sequence(ab):
    cases = ab.window_cases([4096, 16384], [1024, 8192], dtypes=["bf16"], dims=[128])
    assert [(fp8, d, seqlen, window) for fp8, d, seqlen, _, _, window, _ in cases] == [
        (False, 128, 4096, 1024), (False, 128, 16384, 1024), (False, 128, 16384, 8192)
    ]
    for fp8, d, seqlen, batch, heads, window, settings in cases:
        assert batch * seqlen == 16384 and heads * d == 2048
        assert settings == {**attention_sm90.WINDOW_SETTINGS[(d, fp8)], "window_left": window - 1}
    assert ab.window_cases([4096], []) == []


def test_a_runner_calls_into_its_own_library(ab, monkeypatch):
    monkeypatch.setattr(cuda_build, "load", cuda_build.load)  # restored after the test
    old, new = object(), object()
    old_run, new_run = (ab.on_library(lib, lambda: cuda_build.load()) for lib in (old, new))
    assert old_run() is old and new_run() is new and old_run() is old


def test_runners_take_turns_in_alternating_order(ab):
    order = []
    runs = ab.interleaved({"old": "a", "new": "b"}, 4, lambda runner: order.append(runner) or len(order))
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert runs == {"old": [1, 4, 5, 8], "new": [2, 3, 6, 7]}


def test_compare_says_whether_outputs_are_identical_and_by_how_much_they_differ(ab):
    old = torch.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=torch.bfloat16)
    assert ab.compare(old, old.clone()) == (True, 0.0)
    new = old.clone()
    new[1, 0] = 0.25
    assert ab.compare(old, new) == (False, 0.25)


def test_plot_writes_a_png(ab, tmp_path):
    rows = [dict(dtype="bf16", d=128, S=4096, causal=c, old_tflops=500.0, new_tflops=t)
            for c, t in ((False, 510.0), (True, 490.0))]
    ab.plot(rows, tmp_path / "ab.png")
    assert (tmp_path / "ab.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_label_names_the_shape_or_a_ragged_batch(ab):
    assert ab.label(dict(dtype="bf16", d=128, S=4096, causal=False)) == "bf16 d128\nfull S4K"
    assert ab.label(dict(dtype="fp8", d=64, S=0, causal=True)) == "fp8 d64\ncausal ragged"
    assert ab.label(dict(dtype="fp8", d=128, S=16384, causal=True, window=1024)) == "fp8 d128\nwin1024 S16K"


def test_ragged_cases_call_the_public_api_on_the_packed_sequences(ab):
    lengths = [5, 70, 33]
    cases = list(ab.ragged_cases(lengths, dims=[64, 96], device="cpu"))  # no CUDA kernel at d96
    assert [(fp8, d, causal) for fp8, d, causal, *_ in cases] == [
        (fp8, 64, causal) for fp8 in (False, True) for causal in (False, True)
    ]
    assert list(ab.ragged_cases([], device="cpu")) == []  # the default: dense shapes only
    for fp8, d, causal, settings, runner, flops in cases:
        heads = 2048 // d
        assert runner().shape == (sum(lengths), heads, d)  # the reference serves on the CPU
        assert flops == sum(4 * heads * n * n * d / (2 if causal else 1) for n in lengths)
        assert settings == attention_sm90.best_settings(d, fp8, causal, max(lengths))


def test_a_row_compares_the_outputs_and_times_each_library(ab, monkeypatch):
    monkeypatch.setattr(cuda_build, "load", cuda_build.load)  # restored after the test
    # a call takes 2 ms on the old library, 1 on the new (run() points cuda_build.load at its library)
    def timed(run):
        run()
        return 2.0 if cuda_build.load() == "old" else 1.0

    monkeypatch.setattr(ab.bench, "timed", timed)
    out = {"old": torch.ones(3), "new": torch.tensor([1.0, 1.0, 1.5])}
    row = ab.ab_row(lambda: out[cuda_build.load()], {"old": "old", "new": "new"}, 4e12, 3,
                    dtype="bf16", d=128, S=4096, causal=False, settings={})
    assert (row["identical"], row["max_abs_diff"]) == (False, 0.5)
    assert (row["old_tflops"], row["new_tflops"]) == (2000.0, 4000.0) and row["new_runs"] == [4000.0] * 3
    assert row["d"] == 128 and row["settings"] == {}
