"""benchmarks/few_queries.py, the parts that run without a GPU: its FLOP count and the settings it times."""

import pytest
import torch

from fa3fp8 import attention_sm90


@pytest.mark.parametrize(
    "queries,keys", [(1, 1), (1, 300), (64, 300), (300, 300), (192, 4096), (301, 300), (8192, 3072)]
)
def test_causal_flops_count_the_pairs_a_bottom_right_mask_keeps(few, queries, keys):
    visible = torch.ones(queries, keys).tril(diagonal=keys - queries).sum().item()
    assert few.causal_flops(queries, keys, heads=2, d=8) == 4 * 2 * 8 * visible


def test_settings_are_two_and_three_consumers_alone_paired_in_folds_unsplit_and_split_within_one_round(few):
    for fp8, named in few.SETTINGS.items():
        assert set(named) == {"two", "two-pairs", "three", "three-pairs", "two-folds", "three-folds", "two-unsplit",
                              "two-auto", "two-split1", "three-auto", "three-split1"}
        assert named["two-unsplit"] == {**attention_sm90.FEW_WAVES_SETTINGS, "split": False}
        # the API's choices for few waves, as it launches them, and the same splitting launches of one round only
        assert named["two-auto"] == attention_sm90.FEW_WAVES_SETTINGS
        assert named["three-auto"] == attention_sm90.FASTER[(128, fp8, True)]
        for consumers in ("two", "three"):
            assert named[f"{consumers}-split1"] == {**named[f"{consumers}-auto"], "split_rounds": 1}
        assert attention_sm90.CAUSAL_SPLIT_ROUNDS > 1
        for name, extra in named.items():
            assert extra["consumers"] == (3 if name.startswith("three") else 2)
            block_n = extra.get("block_n", 128 if fp8 else attention_sm90.BLOCK_N_16BIT[128][0])
            if name.endswith("folds"):  # folds run one CTA a cluster on 128-key tiles
                assert extra["fold"] and block_n == 128 and "cluster" not in extra
                continue
            if name == "two-unsplit" or name.endswith(("-auto", "-split1")):  # the launcher picks the cluster
                continue
            assert extra["cluster"] == (2 if name.endswith("pairs") else 1)
            if extra["cluster"] == 2:  # pairs exist for these settings, causal
                assert attention_sm90.cluster_for(128, fp8, extra["loop"], extra["consumers"], block_n,
                                                  causal=True) == 2, (fp8, name)
    # what the API takes for few waves, and for short causal attention, is among them
    assert attention_sm90.FEW_WAVES_SETTINGS.items() <= few.SETTINGS[False]["two-pairs"].items()
    for fp8 in (False, True):
        short = {**attention_sm90.FASTER[(128, fp8, True)], **attention_sm90.SHORT_CAUSAL[(128, fp8)]}
        name = "three-folds" if short["consumers"] == 3 else "two-folds"
        assert short.items() <= few.SETTINGS[fp8][name].items(), fp8


def test_d64_settings_are_what_the_d64_unit_builds_split_unsplit_and_in_folds(few):
    # two and three consumers overlapped, each unsplit and in folds; the API's short-causal and few-wave choices
    named = few.settings_for(64, False)
    assert named is few.settings_for(64, True) is few.D64_SETTINGS and few.settings_for(128, True) is few.SETTINGS[True]
    assert set(named) == {"two", "two-unsplit", "two-folds", "three", "three-unsplit", "three-folds"}
    for name, extra in named.items():
        assert extra["loop"] == "overlap" and extra["consumers"] == (3 if name.startswith("three") else 2)
        assert extra.get("split", True) == (not name.endswith("-unsplit")), name
    for fp8 in (False, True):
        assert attention_sm90.best_settings(64, fp8, True, 4096).items() <= named["three-folds"].items()
        assert few.api_settings(fp8, 1, 131072, 132, d=64) in (named["two"], named["three"])


def test_summary_names_the_fastest_setting_and_the_apis_rate_against_it(few):
    rows = [dict(impl=impl, dtype="fp8", queries=640, keys=131072, tflops=tflops)
            for impl, tflops in [("fa3fp8", 600.0), ("cuda-two-auto", 600.0), ("cuda-two-split1", 750.0),
                                 ("sdpa-lower-right", 900.0)]]
    rows.append(dict(impl="fa3fp8", dtype="bf16", queries=1, keys=4096, tflops=5.0, settings={"fold": True}))
    rows.append(dict(impl="cuda-two", dtype="bf16", queries=1, keys=4096, tflops=4.0))
    bf16, fp8 = few.summary(rows)
    assert "fastest cuda-two " in bf16 and "(1.250 of it) {'fold': True}" in bf16
    assert "fastest cuda-two-split1" in fp8 and "(0.800 of it)" in fp8  # SDPA is not a setting


def test_api_settings_are_what_best_settings_takes_for_one_sequence(few):
    # up to SHORT_CAUSAL_MAX_KEYS the folds, for queries of a quarter of the keys or more; else few waves pick two or
    # three consumers by few_waves_time
    for fp8 in (False, True):
        assert few.api_settings(fp8, 1024, 4096, 132)["fold"]
        assert "fold" not in few.api_settings(fp8, 64, 4096, 132)
        assert few.api_settings(fp8, 1, 131072, 132) == attention_sm90.FEW_WAVES_SETTINGS
        assert few.api_settings(fp8, 16384, 131072, 132) == attention_sm90.FASTER[(128, fp8, True)]


def test_api_settings_count_every_sequence_and_head_of_the_launch(few):
    # 1280 queries over 131072 keys: two consumers for one sequence of 32 heads (modeled shorter), three for 2 x 32,
    # whose 3.4 waves of three consumers' work tiles are past FP8's FEW_WAVES
    assert few.api_settings(True, 1280, 131072, 132)["consumers"] == 2
    assert few.api_settings(True, 1280, 131072, 132, sequences_x_heads=64)["consumers"] == 3


def test_heads_must_be_a_multiple_of_kv_heads(few, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["few_queries.py", "--heads", "12", "--kv-heads", "8"])
    with pytest.raises(SystemExit):
        few.main()
    assert "--heads (12) must be a multiple of --kv-heads (8)" in capsys.readouterr().err


def test_plot_writes_a_png(few, tmp_path):
    rows = [dict(impl=impl, dtype=dtype, queries=q, keys=4096, tflops=float(q))
            for impl in ("fa3fp8", "cuda-two") for dtype in ("bf16", "fp8") for q in (1, 64, 512)]
    few.plot(rows, tmp_path / "few.png")
    assert (tmp_path / "few.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
