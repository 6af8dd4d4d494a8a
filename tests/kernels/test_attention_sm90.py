"""The CUDA C++ kernels (`csrc/`): compiled for sm_90a with nvcc on any machine that has it (ptxas's
report: no spills in the default variants, no serialized wgmma; the machine code: wgmma descriptors in uniform
registers), and on a Hopper GPU checked against the references
on packed varlen, GQA, bottom-right causal and ragged-tile cases: the FP8 kernel against the reference's FP8 math
on the same quantized bundle, the BF16/FP16 kernel against fp64 by FlashAttention-3's error rule."""

import ctypes
import functools
import itertools
import random
import re
import subprocess
from pathlib import Path

import pytest
import torch
import triton

from fa3fp8 import attention_sm90, cuda_build
from fa3fp8.fp8_layout import permute_v_keys
from fa3fp8.reference import attention_fp8_reference, attention_varlen_reference, quantize_qkv_reference
from fa3fp8.testing import poison_cuda_cache, rmse

needs_nvcc = pytest.mark.skipif(cuda_build.nvcc() is None, reason="needs nvcc")
needs_hopper = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9, reason="needs a Hopper GPU"
)


@pytest.fixture(scope="module")
def ptxas_report():
    """ptxas's `-v` report of one build, one (kernel, facts) pair per template instance. The build goes where
    `cuda_build.load()` looks for the library, so the tests that call into it load this one (a CI machine builds the
    library once)."""
    report = cuda_build.compile_library(cuda_build.cache_path())
    kernels = re.split(r"Compiling entry function '", report)[1:]
    return {text.split("'", 1)[0]: text for text in kernels}


# A q pointer no tensor map accepts: the C entries answer -2 for settings they have no kernel for before making the
# maps, and -1 (the map of q) for those they have, with or without a GPU.
MISALIGNED_Q = 8


def entry_16bit(d, loop, block_n, cluster=1, causal=0, fold=0, consumers=2, split_rounds=1, window_left=-1):
    """The BF16 C entry's answer for these settings on MISALIGNED_Q (`loop` a LOOPS name or a raw number)."""
    return cuda_build.load().fa3fp8_attn_fwd(MISALIGNED_Q, *[None] * 6, 1, 2, 2, d, 128, 128, 128, 128, 1.0, causal,
                                             attention_sm90.LOOPS.get(loop, loop), consumers, block_n, 1, cluster, fold,
                                             None, 0, split_rounds, window_left, None)


def entry_fp8(d, loop, consumers, block_n, cluster=1, causal=0, fold=0, split_rounds=1, window_left=-1):
    """The FP8 C entry's answer for these settings on MISALIGNED_Q."""
    return cuda_build.load().fa3fp8_attn_fp8_fwd(MISALIGNED_Q, *[None] * 11, 1, 2, 2, d, 128, 128, 128, 1, 1, 64, 128,
                                                 128, 1.0, causal, attention_sm90.LOOPS[loop], consumers, block_n, 1,
                                                 cluster, fold, None, 0, split_rounds, window_left, None)


@needs_nvcc
def test_builds_every_variant(ptxas_report):
    # FP8: (2 consumers: head dim {128, 256} x loop {serial, overlap}, and d128 256-key tiles in order; 3 consumers:
    # d128 in order) x causal x output {bf16, fp16}, pairs of CTAs (2 consumers overlapped at each
    # head dim, 3 in order at d128) x causal x output, and causal folds (2 consumers overlapped at each head dim, 3 in
    # order at d128) x output;
    # BF16/FP16: dtype x (head dim {128, 256} x loop, and d128 128-key tiles overlapped) x causal, pairs of CTAs
    # (dtype x head dim x causal, overlapped, and d128 128-key tiles without a causal mask), causal folds (dtype x
    # head dim, overlapped; d128 on 128-key tiles), and three consumers in order (dtype x (alone or paired) x causal,
    # and causal folds: d128, 128-key tiles); sliding windows (attention_sm90.WINDOW_SETTINGS): FP8 x 2 head dims x
    # output, 16-bit dtype x 2 head dims; d64 (128-key tiles): (FP8 output or 16-bit dtype) x consumers {2, 3} x (loop
    # x causal, and causal folds overlapped)
    kernels = [name for name in ptxas_report if "attn_fwd" in name]
    assert len(kernels) == 24 + 6 * 2 + 6 + 16 + 4 + 4 * 2 + 2 + 4 + 2 * 5 + 4 + 4 + 4 * 2 * (4 + 1)
    # the split's merge: one per (head dim, rows, keys per tile, causal, cluster, fold) of the kernels that split
    # (attention_sm90.splits_tail; without a causal mask FP8 7, BF16/FP16 d128 3, of which the 128-row, 128-key one is
    # FP8's too; causal FP8 7, BF16/FP16 d128 5, of which only the 176-key ones are not FP8's; folds FP8 3, BF16/FP16
    # d128 on FP8 d128's; d64's 128 and 192 rows x (full, causal, folds), FP8's and 16-bit's alike), x output dtype
    merges = [name for name in ptxas_report if "merge_segments" in name]
    assert len(merges) == (9 + 9 + 3 + 6) * 2 and len(merges) + len(kernels) == len(ptxas_report)
    # the Python launcher allocates a workspace for exactly these: (head dim, fp8) -> a merge only its tiles have
    only_theirs = {(128, False): "Li128ELi128ELi176E", (256, False): "Li256ELi128ELi80E",
                   (128, True): "Li128ELi192ELi128E", (256, True): "Li256ELi128ELi128E",
                   (64, False): "merge_segmentsILi64E", (64, True): "merge_segmentsILi64E"}
    for (d, fp8), tiles in only_theirs.items():
        assert any(tiles in name for name in merges) == attention_sm90.splits_tail(d, fp8), (d, fp8)
    for name in merges:  # at most the register that 1 / sum's slow path saves around its call
        assert int(re.search(r"(\d+) bytes spill stores", ptxas_report[name]).group(1)) <= 4, name


TEMPLATE = re.compile(
    r"attn_fwdINS_4(?P<type>E4M3E|HalfI6__halfEE|HalfI13__nv_bfloat16EE)"
    r"Li(?P<d>\d+)ELi(?P<block_n>\d+)ELi(?P<stages>\d)ELi(?P<consumers>\d)ELb(?P<causal>[01])ELi(?P<loop>\d)E"
    r"(?:S2_|6__half|13__nv_bfloat16)Li(?P<cluster>\d)ELb(?P<fold>[01])ELb(?P<window>[01])E"
)


@needs_nvcc
def test_library_exports_no_unique_symbols(ptxas_report):
    # a template function's local static (the launchers' KernelFacts) would be a unique global ("u"), which the
    # dynamic linker shares between two builds loaded in one process (benchmarks/kernel_ab.py): each launch would then
    # trust the other build's "shared memory already allowed"
    symbols = subprocess.run(["nm", "-D", str(cuda_build.cache_path())], capture_output=True, text=True, check=True)
    assert "fa3fp8_attn_fwd" in symbols.stdout
    assert [line for line in symbols.stdout.splitlines() if line.split()[-2:-1] == ["u"]] == []


@needs_nvcc
def test_default_variants_have_no_spills(ptxas_report):
    # the defaults of attention_sm90.LOOP on two consumers and FP8's 128-key tiles; FP8 d256's causal overlapped loop
    # spills a little (O takes 128 registers per thread) and still measured faster than the serial one, and three
    # 16-bit consumers causal in pairs 8 bytes once per work tile (session 22's SASS: outside the loop's wgmma)
    checked = 0
    for name, text in ptxas_report.items():
        t = TEMPLATE.search(name)
        if t is None:  # merge_segments
            continue
        d, fp8 = int(t["d"]), t["type"] == "E4M3E"
        default_loop = int(t["loop"]) == attention_sm90.LOOPS[attention_sm90.LOOP[(d, fp8)]]
        three_16bit = not fp8 and t["consumers"] == "3"  # 16-bit d128 in order, alone, paired or folds
        if (t["consumers"] == "2" and default_loop and (not fp8 or t["block_n"] == "128")) or three_16bit:
            spilled = int(re.search(r"(\d+) bytes spill stores", text).group(1))
            # the window's bound takes a register more there too (once per work tile, outside the wgmma loop)
            paired_causal = three_16bit and t["causal"] == "1" and (t["cluster"] == "2" or t["window"] == "1")
            assert spilled <= (64 if fp8 and d == 256 else 8 if paired_causal else 0), name
            checked += 1
    # FP8: 2 head dims x causal x 2 output dtypes, the pairs (2 head dims x causal x 2 output dtypes) and the folds
    # (2 head dims x 2 output dtypes); 16-bit: 2 dtypes x (2 head dims + d128's 128-key tiles) x causal, the pairs
    # (2 dtypes x 2 head dims x causal, and d128's 128-key tiles without a mask), the folds (2 dtypes x 2 head dims)
    # and three consumers (2 dtypes x (alone or paired) x causal, and folds); the windows (FP8 d256 x 2 output
    # dtypes; 16-bit: 2 dtypes x 2 head dims); d64 (FP8: 2 output dtypes x (causal, and folds) on two consumers
    # overlapped; 16-bit: 2 dtypes x (causal x (two consumers overlapped, three consumers x loop), and folds of two and
    # of three consumers))
    assert checked == 8 + 4 * 2 + 4 + 12 + 4 * 2 + 2 + 4 + 2 * 5 + 2 + 4 + 2 * (2 + 1) + 2 * (2 * (1 + 2) + 2)
    # the FP8 d128 windows run three consumers in order, like the default causal kernel, and every d64 kernel (O takes
    # 32 registers a thread): no spills either
    for name, text in ptxas_report.items():
        t = TEMPLATE.search(name)
        if t is not None and ((t["window"] == "1" and t["type"] == "E4M3E" and t["d"] == "128") or t["d"] == "64"):
            assert int(re.search(r"(\d+) bytes spill stores", text).group(1)) == 0, name


@needs_nvcc
def test_wgmma_is_not_serialized(ptxas_report):
    # ptxas waits after every wgmma when a non-wgmma instruction writes one of its operands while it is in flight
    for name, text in ptxas_report.items():
        assert "serialized" not in text, name


def destination(op):
    """The register a SASS instruction (predicated or not) writes: its first operand."""
    return re.split(r"[\s,]+", op.split(None, 2 if op.startswith("@") else 1)[-1])[0]


def wgmma_descriptor_writes(sass):
    """For each wgmma (HGMMA / QGMMA) of each function in a `cuobjdump -sass` listing, the instructions since the
    previous wgmma of its issue run (a run ends at a wait, a barrier or a branch) that write the uniform registers its
    descriptors are read from (gdesc[URn]: URn to URn + 3): {function: [[instruction, ...] per wgmma]}."""
    found = {}
    for function in re.split(r"\n\s*Function : ", sass)[1:]:
        name, writes, run = function.split("\n", 1)[0].strip(), [], None
        for line in function.splitlines()[1:]:
            op = re.sub(r"^\s*/\*[0-9a-f]+\*/\s*", "", line).split(";")[0].strip()
            if not op or op.startswith(("/*", ".")):
                continue
            if "GMMA" in op:
                first = int(re.search(r"gdesc\[UR(\d+)\]", op).group(1))
                descriptors = {f"UR{n}" for n in range(first, first + 4)}
                if run is not None:
                    writes.append([i for i in run if destination(i) in descriptors])
                run = []
            elif any(stop in op for stop in ("DEPBAR", "SYNCS", "BRA", "BAR.", "EXIT", "RET")):
                run = None
            elif run is not None:
                run.append(op)
        found[name] = writes
    return found


CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


@pytest.fixture(scope="module")
def library_sass(ptxas_report):
    """`cuobjdump -sass` of the library ptxas_report built."""
    if not CUOBJDUMP.is_file():
        pytest.skip("needs triton's cuobjdump")
    return subprocess.run([str(CUOBJDUMP), "-sass", str(cuda_build.cache_path())], capture_output=True, text=True,
                          check=True).stdout


@needs_nvcc
def test_wgmma_descriptors_stay_in_uniform_registers(ptxas_report, library_sass):
    # each wgmma takes its descriptors from uniform registers that an add or two advanced (desc_at); built from a value
    # ptxas cannot prove warp-uniform (the warpgroup from threadIdx), every Q·Kᵀ wgmma moved them there with R2UR
    # after 5-11 instructions of address arithmetic (H200, session 18: 1-4% of the loop). The FRESH_DESC kernels
    # (BF16/FP16 d256 without a causal mask) make them anew, in uniform registers too. d64's overlapped loop makes the V
    # slot's first descriptor between its Q·Kᵀ wgmmas and its P·V ones: up to eight instructions once a tile, one of
    # them an R2UR in FP8's three-consumer loop without a mask.
    kernels = {name: writes for name, writes in wgmma_descriptor_writes(library_sass).items() if "attn_fwd" in name}
    assert len(kernels) == len([name for name in ptxas_report if "attn_fwd" in name])
    for name, writes in kernels.items():
        t = TEMPLATE.search(name)
        fresh = t["type"] != "E4M3E" and t["d"] == "256" and t["causal"] == "0"
        assert writes, name
        d64 = t["d"] == "64"
        for ops in writes:
            assert sum(op.startswith("R2UR") for op in ops) <= (1 if d64 else 0), (name, ops)
            assert fresh or len(ops) <= (8 if d64 else 6), (name, ops)


@needs_nvcc
def test_o_leaves_by_tma_where_shared_memory_has_room(ptxas_report, library_sass):
    # a kernel whose Q, K/V ring (and barriers, in 1 KB-aligned storage) leave room for its O rows in 16 bits within
    # sm_90's 227 KB (1 KB of it the alignment) stores O by TMA, one store per 128-byte panel of a row; so does one
    # without that room whose O rows fit in the two V slots of its overlapped loop (16-bit d128 on 176-key tiles and
    # d256 on 80-key ones), staging O there; the others (FP8 d128 on 256-key tiles) store from registers
    functions = {f.split("\n", 1)[0].strip(): f for f in re.split(r"\n\s*Function : ", library_sass)[1:]}
    kernels = {name: text for name, text in functions.items() if "attn_fwd" in name}
    assert len(kernels) == len([name for name in ptxas_report if "attn_fwd" in name])
    staged = in_v_kernels = 0
    for name, text in kernels.items():
        t = TEMPLATE.search(name)
        d, block_n, stages, consumers = (int(t[key]) for key in ("d", "block_n", "stages", "consumers"))
        element = 1 if t["type"] == "E4M3E" else 2
        barriers = 8 * (2 + 4 * stages)
        storage = -(-(consumers * 64 * d * element + 2 * stages * block_n * d * element + barriers) // 1024) * 1024
        room = storage + consumers * 64 * d * 2 + 1024 <= 227 * 1024
        o_fits_v = consumers * 64 * d * 2 <= stages * block_n * d * element
        in_v = not room and t["loop"] == "1" and stages == 2 and o_fits_v
        assert text.count("UTMASTG") == (d * 2 // 128 if room or in_v else 0), name
        staged += room
        in_v_kernels += in_v
    # FP8 on 128-key tiles x 2 output dtypes (two consumers, each head dim: 2 loops x causal, pairs x causal, folds;
    # three consumers at d128: causal, pairs x causal, folds) and 16-bit d128 on 128-key tiles x 2 dtypes (causal,
    # pairs without a mask, folds; three consumers: causal, pairs x causal, folds), and the windows on 128-key tiles
    # (FP8 x 2 head dims x 2 output dtypes, 16-bit d128 x 2 dtypes), and every d64 kernel (one panel a row of O)
    assert staged == (2 * 7 + 5) * 2 + 9 * 2 + 4 + 2 + 4 * 2 * (4 + 1)
    # 16-bit x 2 dtypes: d128 on 176-key tiles (one CTA and pairs, x causal) and d256 (one CTA and pairs, x causal;
    # causal folds and windows)
    assert in_v_kernels == 20


@needs_nvcc
def test_default_settings_launch_variants_the_library_builds():
    # each default (best_settings for long and short sequences, the head dim's tiles, and cluster_for's pairs) gets as
    # far as the tensor maps in the C entries (-1 on the misaligned q), never -2 (no such kernel); launches of one
    # query per sequence and head fill a fraction of a wave (FEW_WAVES)
    cases = itertools.product(attention_sm90.FASTER, (None, 1024, 4096, 65536), (None, (32, 1, 132)))
    for (d, fp8, causal), keys, launch in cases:
        settings = attention_sm90.best_settings(d, fp8, causal, keys, launch=launch)
        fold = int(settings.get("fold", False))
        loop = settings.get("loop", attention_sm90.LOOP[(d, fp8)])
        consumers = settings.get("consumers", 2)
        block_n = settings.get("block_n", 128 if fp8 else attention_sm90.BLOCK_N_16BIT[d][0])
        cluster = attention_sm90.cluster_for(d, fp8, loop, consumers, block_n, fold, causal=causal)
        if fp8:
            code = entry_fp8(d, loop, consumers, block_n, cluster, int(causal), fold)
        else:
            code = entry_16bit(d, loop, block_n, cluster, int(causal), fold, consumers)
        assert code == -1, (d, fp8, causal, keys)
    assert attention_sm90.cluster_for(128, False, "overlap", 2, 176) == 2  # causal or not
    assert attention_sm90.cluster_for(128, False, "overlap", 2, 128, fold=True) == 1  # a fold is one CTA's
    assert attention_sm90.cluster_for(128, True, "serial", 3, 128, fold=True) == 1
    assert attention_sm90.cluster_for(128, False, "overlap", 2, 128, causal=True) == 1  # causal: the default tiles
    assert attention_sm90.cluster_for(128, False, "overlap", 2, 128) == 2  # without a mask also 128-key tiles
    assert attention_sm90.cluster_for(128, False, "serial", 3, 128) == 2  # and three consumers in order
    assert attention_sm90.cluster_for(64, False, "overlap", 2, 128) == 1  # d64 builds no pairs
    assert attention_sm90.cluster_for(256, False, "overlap", 2, 80) == 2  # BF16 d256: pairs without a causal mask
    assert attention_sm90.cluster_for(256, False, "overlap", 2, 80, causal=True) == 1
    assert attention_sm90.cluster_for(256, True, "overlap", 2, 128, causal=True) == 2  # FP8 d256 either way
    assert attention_sm90.cluster_for(128, False, "serial", 3, 128, causal=True) == 2  # causal or not
    assert attention_sm90.cluster_for(128, False, "serial", 3, 128, fold=True, causal=True) == 1
    # queries within one CTA's rows (decode-shaped calls): a pair's second CTA would have none
    assert attention_sm90.cluster_for(128, False, "overlap", 2, 176, max_seqlen_q=128) == 1
    assert attention_sm90.cluster_for(128, False, "overlap", 2, 176, max_seqlen_q=129) == 2
    assert attention_sm90.cluster_for(128, True, "serial", 3, 128, max_seqlen_q=192) == 1
    # an odd count of few row blocks: the last pair's second CTA would compute a whole block past the end
    assert attention_sm90.cluster_for(128, True, "serial", 3, 128, max_seqlen_q=2048) == 1  # 11 blocks of 192
    assert attention_sm90.cluster_for(128, True, "serial", 3, 128, max_seqlen_q=4096) == 2  # 22
    assert attention_sm90.cluster_for(128, False, "overlap", 2, 176, max_seqlen_q=2100) == 1  # 17 of 128
    bound = attention_sm90.PAIRS_MIN_ODD_BLOCKS
    assert attention_sm90.cluster_for(128, False, "overlap", 2, 176, max_seqlen_q=128 * bound - 1) == 2  # even
    assert attention_sm90.cluster_for(128, False, "overlap", 2, 176, max_seqlen_q=128 * (bound + 1)) == 2  # odd, many
    assert attention_sm90.cluster_for(128, False, "overlap", 2, 176, max_seqlen_q=128 * (bound - 1)) == 1  # odd, few


def test_causal_attention_over_short_keys_runs_alone():
    # where folds do not take it (few queries), causal attention over at most SHORT_CAUSAL_MAX_KEYS keys runs one
    # CTA per work tile: pairs lost there in every case timed; beyond it, and without a mask, pairs stay
    limit = attention_sm90.SHORT_CAUSAL_MAX_KEYS
    for fp8, loop, consumers, block_n in [(False, "overlap", 2, 176), (False, "serial", 3, 128),
                                          (True, "overlap", 2, 128), (True, "serial", 3, 128)]:
        pairs = functools.partial(attention_sm90.cluster_for, 128, fp8, loop, consumers, block_n, max_seqlen_q=4096)
        assert pairs(causal=True, max_seqlen_k=limit) == 1, (fp8, consumers)
        assert pairs(causal=True, max_seqlen_k=limit + 1) == 2, (fp8, consumers)
        assert pairs(causal=True) == 2, (fp8, consumers)  # keys unknown
        assert pairs(causal=False, max_seqlen_k=limit) == 2, (fp8, consumers)
    # the API's choice for 512 queries over 4096 keys: two consumers (not folds), alone
    settings = attention_sm90.best_settings(128, False, True, 4096, equal_lengths=True, launch=(32, 512, 132))
    assert settings == attention_sm90.FEW_WAVES_SETTINGS
    assert attention_sm90.cluster_for(128, False, settings["loop"], settings["consumers"], 176, max_seqlen_q=512,
                                      causal=True, max_seqlen_k=4096) == 1


def test_attention_without_a_mask_over_few_keys_runs_alone():
    # a pair's lockstep costs more than its halved K/V loads save over fewer than PAIRS_MIN_KEYS keys
    for d, fp8, loop, consumers, block_n in [(128, False, "overlap", 2, 128), (128, False, "serial", 3, 128),
                                             (256, False, "overlap", 2, 80), (128, True, "serial", 3, 128),
                                             (256, True, "overlap", 2, 128)]:
        bound = attention_sm90.PAIRS_MIN_KEYS[(d, fp8)]
        pairs = functools.partial(attention_sm90.cluster_for, d, fp8, loop, consumers, block_n, max_seqlen_q=4096)
        assert pairs(max_seqlen_k=bound - 1) == 1, (d, fp8, consumers)
        assert pairs(max_seqlen_k=bound) == 2, (d, fp8, consumers)
        assert pairs() == 2, (d, fp8, consumers)  # keys unknown


def test_supported_blocks(monkeypatch):
    monkeypatch.setattr(cuda_build, "available", lambda: True)
    assert attention_sm90.supported(64, 64, 128)
    assert not attention_sm90.supported(96, 64, 128)
    assert not attention_sm90.supported(128, 64, 64)  # K/V scales are per 128 keys
    assert not attention_sm90.supported(128, 32, 128)


def test_auto_settings_are_variants_the_library_builds():
    # FASTER is what FA3FP8_KERNEL=auto launches: each entry must name a loop, consumer count and tile the C entry
    # points accept (three consumers: d128, serial, 128 keys; 256-key tiles: FP8 d128)
    for (d, fp8, causal), settings in attention_sm90.FASTER.items():
        assert d in attention_sm90.BUILT_HEAD_DIMS
        loop = settings.get("loop", attention_sm90.LOOP[(d, fp8)])
        assert loop in attention_sm90.LOOPS
        block_n = settings.get("block_n", 128)
        assert block_n in attention_sm90.FP8_BLOCK_N and (block_n == 128 or (fp8 and d == 128 and loop == "serial"))
        if settings.get("consumers", 2) == 3:
            assert block_n == 128 and (d == 64 or (d == 128 and loop == "serial"))
    assert attention_sm90.best_settings(96, False, False) is None  # d96 is not built


def test_short_causal_attention_takes_folds():
    limit = attention_sm90.SHORT_CAUSAL_MAX_KEYS
    for d, fp8 in itertools.product(attention_sm90.BUILT_HEAD_DIMS, (False, True)):
        for keys in (1000, 3072, limit):
            assert attention_sm90.best_settings(d, fp8, True, keys) == {
                **attention_sm90.FASTER[(d, fp8, True)], **attention_sm90.SHORT_CAUSAL[(d, fp8)]}, (d, fp8, keys)
        for causal, keys in [(True, limit + 1), (True, None), (False, attention_sm90.SHORT_FULL_MAX_KEYS + 1)]:
            settings = attention_sm90.best_settings(d, fp8, causal, keys)
            assert settings == attention_sm90.FASTER[(d, fp8, causal)] and "fold" not in settings, (d, fp8, keys)
    assert attention_sm90.best_settings(128, False, True, 4096)["block_n"] == 128  # folds at d128: 128-key tiles
    assert attention_sm90.best_settings(128, True, True, 3072)["consumers"] == 3  # their last round split


def test_causal_attention_of_few_queries_over_its_keys_takes_no_folds():
    # a quarter of the keys or more: folds; fewer queries: one CTA per work tile, split along the keys where few
    share = attention_sm90.FOLDS_MIN_QUERY_SHARE
    for d, fp8 in itertools.product(attention_sm90.HEAD_DIMS, (False, True)):
        for keys in (2048, 4096):
            folds = attention_sm90.best_settings(d, fp8, True, keys, launch=(32, int(share * keys), 132))
            assert folds.get("fold"), (d, fp8, keys)
            for queries in (1, int(share * keys) - 1):
                settings = attention_sm90.best_settings(d, fp8, True, keys, launch=(32, queries, 132))
                assert not settings.get("fold"), (d, fp8, keys, queries)
    # FP8 d128 over 16K keys of equal lengths: folds from 4096 queries
    for queries, fold in [(512, False), (2048, False), (4096, True), (16384, True)]:
        settings = attention_sm90.best_settings(128, True, True, 16384, equal_lengths=True, launch=(32, queries, 132))
        assert bool(settings.get("fold")) == fold, queries


def test_short_causal_fp8_d128_folds_take_three_consumers_unless_the_queries_outnumber_the_keys():
    two = {"loop": "overlap", "consumers": 2, "fold": True}
    three = {"loop": "serial", "consumers": 3, "fold": True}
    # whole 192-row blocks or not (their rows past the queries lie before the first one): three consumers
    for keys in (1, 1024, 1536, 2048, 3072, 4096):
        assert attention_sm90.best_settings(128, True, True, keys) == three, keys
        assert attention_sm90.best_settings(128, True, True, keys, equal_lengths=True) == three, keys
    assert attention_sm90.best_settings(128, True, True, 16384, equal_lengths=True) == three
    assert attention_sm90.best_settings(128, True, True, 4096, launch=(64, 2048, 132)) == three
    # more queries than keys, in whole blocks or not: the first rows see no key
    assert attention_sm90.best_settings(128, True, True, 3072, equal_lengths=True, launch=(32, 6144, 132)) == two
    assert attention_sm90.best_settings(128, True, True, 3072, equal_lengths=True, launch=(32, 8192, 132)) == two
    for d, fp8 in [(128, False), (256, False), (256, True)]:  # the others keep SHORT_CAUSAL's
        for keys in (1024, 4096):
            assert attention_sm90.best_settings(d, fp8, True, keys) == {
                **attention_sm90.FASTER[(d, fp8, True)], **attention_sm90.SHORT_CAUSAL[(d, fp8)]}, (d, fp8)
    assert attention_sm90.best_settings(128, True, False, 1024)["consumers"] == 3  # without a mask three lead


def test_short_causal_d64_folds_take_three_consumers_unless_the_keys_are_few_or_outnumbered():
    for fp8 in (False, True):
        for keys in (640, 1024, 1280, 2048, 4096, 8192):
            settings = attention_sm90.best_settings(64, fp8, True, keys)
            assert settings == {"loop": "overlap", "consumers": 3, "fold": True}, (fp8, keys)
        assert attention_sm90.best_settings(64, fp8, True, 3072, launch=(32, 6144, 132))["consumers"] == 2
    # over at most FOLDS_TWO_CONSUMERS_MAX_KEYS keys 16-bit folds take two consumers, FP8's keep three
    for keys in (1, 256, 512):
        assert attention_sm90.best_settings(64, False, True, keys) == {"loop": "overlap", "consumers": 2, "fold": True}
        assert attention_sm90.best_settings(64, True, True, keys)["consumers"] == 3, keys


def test_attention_without_a_mask_takes_128_key_tiles_at_16bit_d128():
    # two consumers overlapped up to SHORT_FULL_MAX_KEYS keys (alone: fewer than PAIRS_MIN_KEYS), three in order
    # beyond (192-row blocks), paired
    limit = attention_sm90.SHORT_FULL_MAX_KEYS
    for keys in (1024, limit):
        settings = attention_sm90.best_settings(128, False, False, keys)
        assert settings == {"loop": "overlap", "consumers": 2, "block_n": 128}, keys
        assert attention_sm90.cluster_for(128, False, "overlap", 2, settings["block_n"], max_seqlen_k=keys) == 1
        assert attention_sm90.cluster_for(128, False, "overlap", 2, settings["block_n"]) == 2
    for keys in (limit + 1, 16384, None):
        settings = attention_sm90.best_settings(128, False, False, keys)
        assert settings == {"loop": "serial", "consumers": 3, "block_n": 128}, keys
    assert attention_sm90.cluster_for(128, False, "serial", 3, 128) == 2
    for d, fp8 in [(256, False), (128, True)]:
        assert "block_n" not in attention_sm90.best_settings(d, fp8, False, 1024), (d, fp8)


def test_long_causal_16bit_d128_attention_takes_three_consumers_in_pairs():
    # beyond SHORT_CAUSAL_MAX_KEYS, three consumers in order on 128-key tiles, paired; up to it their folds (two
    # consumers overlapped where the queries outnumber the keys)
    limit = attention_sm90.SHORT_CAUSAL_MAX_KEYS
    three = {"loop": "serial", "consumers": 3, "block_n": 128}
    for keys in (limit + 1, 65536, None):
        assert attention_sm90.best_settings(128, False, True, keys) == three, keys
    assert attention_sm90.cluster_for(128, False, "serial", 3, 128, causal=True) == 2
    for keys in (769, 1000, 4096, limit):
        assert attention_sm90.best_settings(128, False, True, keys) == {**three, "fold": True}, keys
    assert attention_sm90.cluster_for(128, False, "serial", 3, 128, fold=True, causal=True) == 1
    two = {"loop": "overlap", "consumers": 2, "block_n": 128, "fold": True}
    assert attention_sm90.best_settings(128, False, True, 3072, launch=(32, 6144, 132)) == two
    for keys in (256, 768):  # few keys: FOLDS_TWO_CONSUMERS_MAX_KEYS
        assert attention_sm90.best_settings(128, False, True, keys) == two, keys


def test_causal_attention_of_few_waves_takes_the_consumers_of_the_shorter_modeled_time():
    # the 8B model's 32 heads on 132 SMs, 131072 keys: 1024 queries fill 1.45 waves of three consumers' tiles, 4096
    # queries 5.3, 16384 queries 20.8; below 8 waves (BF16) or 2 (FP8) few_waves_time picks the consumers
    few = attention_sm90.FEW_WAVES_SETTINGS
    for fp8 in (False, True):
        three = attention_sm90.FASTER[(128, fp8, True)]
        for queries, settings in [(1, few), (128, few), (192, three), (256, few), (384, three), (512, few),
                                  (768, three), (1024, few)]:
            assert attention_sm90.best_settings(128, fp8, True, 131072, launch=(32, queries, 132)) == settings, queries
        assert attention_sm90.best_settings(128, fp8, True, 131072, launch=(32, 16384, 132))["consumers"] == 3
        assert attention_sm90.best_settings(128, fp8, True, 131072)["consumers"] == 3  # launch unknown
        # without a mask the persistent launch splits its last round instead; folds are persistent too
        assert attention_sm90.best_settings(128, fp8, False, 131072, launch=(32, 1, 132))["consumers"] == 3
    # 4096 queries: three consumers' 352 pairs fill 5.3 rounds, the last one split in 3 parts, ahead of two's 8
    for fp8 in (False, True):
        assert attention_sm90.best_settings(128, fp8, True, 131072, launch=(32, 4096, 132))["consumers"] == 3
    assert attention_sm90.best_settings(256, False, True, 131072, launch=(8, 1, 132)) == {}  # two consumers already
    assert attention_sm90.three_consumer_waves(32, 192, 132) == 32 / 132
    assert attention_sm90.three_consumer_waves(32, 193, 132) == 64 / 132


@needs_nvcc
def test_d64_few_query_causal_attention_takes_the_consumers_timed_faster():
    # session 36's few_queries.py --d 64 (32 / 8 heads over 131072 keys, H100): BF16's three consumers were the faster
    # at every query count, FP8's only where their 192-row blocks pad little (192, 1024 queries)
    three, two = attention_sm90.FASTER[(64, False, True)], attention_sm90.FEW_WAVES_SETTINGS
    for queries in (1, 64, 128, 192, 256, 512, 1024):
        assert attention_sm90.best_settings(64, False, True, 131072, launch=(32, queries, 132)) == three, queries
        expected = three if queries in (192, 1024) else two
        assert attention_sm90.best_settings(64, True, True, 131072, launch=(32, queries, 132)) == expected, queries


@needs_nvcc
def test_few_waves_time_counts_the_rows_a_cta_computes_over_all_keys():
    time = functools.partial(attention_sm90.few_waves_time, d=128, fp8=True, max_seqlen_k=131072)
    two, three = attention_sm90.FEW_WAVES_SETTINGS, attention_sm90.FASTER[(128, True, True)]
    speed = attention_sm90.THREE_CONSUMER_SPEED[(128, True)]
    # one query per head: 32 work tiles of 128 or 192 rows, each split in 4 parts (128 of 132 CTAs)
    assert time(two, launch=(32, 1, 132)) == 128 / 4
    assert time(three, launch=(32, 1, 132)) == 192 / 4 / speed
    # 192 queries: two consumers' 2 row blocks run in pairs, 32 pairs in 2 parts each; three consumers' one in 4
    assert time(two, launch=(32, 192, 132)) == 128 / 2
    assert time(three, launch=(32, 192, 132)) == 192 / 4 / speed
    # 1024 queries: 128 pairs of two consumers fill 1.94 rounds of 66, whose last 62 are too many to cut; 96 pairs of
    # three fill 1.45, their last 30 cut in 2 parts: 1.5 rounds (1 round of whole work tiles would not split: 2)
    assert time(two, launch=(32, 1024, 132)) == 128 * 2
    assert time(three, launch=(32, 1024, 132)) == 192 * 1.5 / speed
    assert time({**three, "split_rounds": 1}, launch=(32, 1024, 132)) == 192 * 2 / speed
    # 1280 queries: 160 pairs fill 2.4 rounds of 66; the last round's 28 pairs cut in 2 parts, 2.5 (3 rounds of
    # whole work tiles where split_rounds keeps it from the split)
    assert time(two, launch=(32, 1280, 132)) == 128 * 2.5
    assert time({**two, "split_rounds": 2}, launch=(32, 1280, 132)) == 128 * 3
    # short keys: parts that would save too little are not made
    assert attention_sm90.few_waves_time(two, 128, True, (32, 1, 132), max_seqlen_k=2048) == 128 / 4
    assert attention_sm90.few_waves_time(two, 128, True, (32, 1, 132), max_seqlen_k=1024) == 128


@needs_nvcc
def test_few_waves_time_counts_whole_rounds_where_the_kernel_does_not_split(monkeypatch):
    two = attention_sm90.FEW_WAVES_SETTINGS
    for splits, rows in [(True, 128 / 4), (False, 128)]:  # one query per head: 32 work tiles, in 4 parts or whole
        monkeypatch.setattr(attention_sm90, "splits_tail", lambda d, fp8, splits=splits: splits)
        assert attention_sm90.few_waves_time(two, 64, False, (32, 1, 132), max_seqlen_k=131072) == rows, splits


def test_equal_length_fp8_d128_causal_attention_takes_folds_to_16k():
    # sequences of one length split the folds' last round: FP8 d128 takes folds up to 16K keys then, only then
    folds = attention_sm90.best_settings(128, True, True, 16384, equal_lengths=True)
    assert folds == {**attention_sm90.FASTER[(128, True, True)], **attention_sm90.SHORT_CAUSAL[(128, True)]}
    assert "fold" not in attention_sm90.best_settings(128, True, True, 16384)
    assert "fold" not in attention_sm90.best_settings(128, True, True, 16385, equal_lengths=True)
    assert "fold" not in attention_sm90.best_settings(128, False, True, 16384, equal_lengths=True)
    assert "fold" not in attention_sm90.best_settings(128, True, False, 4096, equal_lengths=True)


def test_fp8_layout_follows_the_kernel_that_will_read_it(monkeypatch):
    # quantize_qkv writes V key-permuted exactly where this kernel serves FP8: the Triton kernel reads the natural
    # order only
    monkeypatch.setattr(cuda_build, "available", lambda: True)
    for choice, d, expected in [("auto", 128, True), ("auto", 256, True), ("cuda", 128, True), ("triton", 128, False),
                                ("auto", 64, True), ("cuda", 64, True), ("triton", 64, False)]:
        monkeypatch.setenv("FA3FP8_KERNEL", choice)
        assert attention_sm90.serves_fp8(d, 64 if d < 256 else 128, 128) is expected, (choice, d)
    monkeypatch.setenv("FA3FP8_KERNEL", "cuda")
    assert not attention_sm90.serves_fp8(128, 64, 64)  # K/V blocks the kernel does not take
    monkeypatch.setattr(cuda_build, "available", lambda: False)
    assert not attention_sm90.serves_fp8(128, 64, 128)


@needs_nvcc
def test_d64_runs_three_consumers_overlapped_on_settings_it_builds():
    # FASTER's d64 entry (no pairs or short-key settings without a mask at d64), short causal attention in folds
    # (three consumers; two where the queries outnumber the keys or, 16-bit, the keys are few), and the launchers'
    # defaults (FA3FP8_KERNEL=cuda without best settings) are built too; windows at d64 stay on the Triton kernel
    three = {"loop": "overlap", "consumers": 3}
    for fp8, causal, keys in itertools.product((False, True), (False, True), (None, 1024, 4096, 65536)):
        settings = attention_sm90.best_settings(64, fp8, causal, keys)
        fold = causal and keys in (1024, 4096)
        assert settings == ({**three, "fold": True} if fold else three), (fp8, causal, keys)
    for fp8, causal, consumers in itertools.product((False, True), (False, True), (2, 3)):
        block_n = attention_sm90.KV_BLOCK if fp8 else attention_sm90.BLOCK_N_16BIT[64][0]
        for fold in (False, True) if causal else (False,):
            assert attention_sm90.cluster_for(64, fp8, "overlap", consumers, block_n, fold, causal=causal,
                                              max_seqlen_k=4096) == 1
            if fp8:
                assert entry_fp8(64, "overlap", consumers, block_n, causal=int(causal), fold=int(fold)) == -1
            else:
                entry = entry_16bit(64, "overlap", block_n, causal=int(causal), fold=int(fold), consumers=consumers)
                assert entry == -1
    assert not attention_sm90.serves_windows(64)
    loop, block_n = attention_sm90.LOOP[(64, False)], attention_sm90.BLOCK_N_16BIT[64][0]
    cluster = attention_sm90.cluster_for(64, False, loop, 2, block_n)
    fp8_loop = attention_sm90.LOOP[(64, True)]
    fp8_cluster = attention_sm90.cluster_for(64, True, fp8_loop, 2, attention_sm90.KV_BLOCK)
    for causal in (0, 1):
        assert entry_16bit(64, loop, block_n, cluster, causal) == -1
        assert entry_fp8(64, fp8_loop, 2, attention_sm90.KV_BLOCK, fp8_cluster, causal) == -1


def test_a_head_dim_without_folds_keeps_its_settings_over_short_causal_keys(monkeypatch):
    # where SHORT_CAUSAL has no entry, the FASTER entry serves short causal attention as it is
    settings = {"loop": "overlap", "consumers": 3}
    monkeypatch.delitem(attention_sm90.SHORT_CAUSAL, (64, False))
    assert attention_sm90.best_settings(64, False, True, 4096, launch=(64, 4096, 132)) == settings
    assert attention_sm90.best_settings(64, False, True, 4096, equal_lengths=True) == settings


def test_16bit_needs_a_supported_head_dim_and_aligned_contiguous_data(monkeypatch):
    monkeypatch.setattr(cuda_build, "available", lambda: True)
    for d in (64, 128, 256):
        q = torch.zeros(64, 2, d, dtype=torch.bfloat16)
        assert attention_sm90.supported_16bit(q, q, q), d
    q = torch.zeros(64, 2, 96, dtype=torch.bfloat16)
    assert not attention_sm90.supported_16bit(q, q, q)
    x = torch.zeros(64 * 2 * 128 + 1, dtype=torch.bfloat16)[1:].view(64, 2, 128)  # 2 bytes off a 16-byte boundary
    assert not attention_sm90.supported_16bit(x, x, x)
    y = torch.zeros(64, 4, 128, dtype=torch.bfloat16)[:, ::2]
    assert not attention_sm90.supported_16bit(y, y, y)  # not contiguous


@needs_nvcc
def test_16bit_entry_point_checks_its_settings_before_any_launch():
    """The C entry answers -2 for a (head dim, loop, block_n) it has no kernel for; a supported one gets as far as the
    tensor maps (-1 on MISALIGNED_Q) before anything launches."""
    entry = entry_16bit

    # d64: 128-key tiles, two or three consumers, either loop, one CTA, causal folds overlapped, no windows
    for loop, consumers, causal in itertools.product(("serial", "overlap"), (2, 3), (0, 1)):
        assert entry(64, loop, 128, causal=causal, consumers=consumers) == -1, (loop, consumers, causal)
    assert entry(64, "overlap", 176) == -2
    assert entry(64, "overlap", 128, consumers=4) == -2
    assert entry(64, 2, 128) == -2  # no such loop
    assert entry(64, "overlap", 128, cluster=2) == -2
    for consumers in (2, 3):
        assert entry(64, "overlap", 128, causal=1, fold=1, consumers=consumers) == -1, consumers
        assert entry(64, "overlap", 128, fold=1, consumers=consumers) == -2, consumers  # folds are causal
        assert entry(64, "serial", 128, causal=1, fold=1, consumers=consumers) == -2, consumers
    assert entry(64, "overlap", 128, causal=1, window_left=7) == -2
    assert entry(64, "overlap", 128, causal=1, split_rounds=0) == -2
    assert entry(128, "overlap", 130) == -2
    assert entry(128, "serial", 128) == -2  # 128-key 16-bit tiles on two consumers: the overlapped loop only
    assert entry(256, "overlap", 128) == -2
    assert entry(128, 2, 176) == -2  # no such loop
    assert entry(128, "overlap", 176, cluster=3) == -2
    assert entry(128, "serial", 176, cluster=2) == -2
    assert entry(128, "overlap", 128, cluster=2, causal=1) == -2  # 128-key pairs without a causal mask only
    assert entry(128, "overlap", 128, cluster=2) == -1
    # three consumers: d128, in order, 128-key tiles; alone or paired, causal or not, and causal folds
    for cluster, causal in itertools.product((1, 2), (0, 1)):
        assert entry(128, "serial", 128, cluster=cluster, causal=causal, consumers=3) == -1, (cluster, causal)
    assert entry(128, "serial", 128, causal=1, fold=1, consumers=3) == -1
    assert entry(128, "serial", 128, fold=1, consumers=3) == -2  # folds are causal
    assert entry(128, "serial", 128, causal=1, fold=1, cluster=2, consumers=3) == -2
    assert entry(128, "serial", 128, consumers=4) == -2
    assert entry(128, "overlap", 128, consumers=3) == -2
    assert entry(128, "serial", 176, consumers=3) == -2
    assert entry(256, "serial", 80, consumers=3) == -2
    for d, loop, block_n in [(128, "overlap", 128), (128, "serial", 176), (128, "overlap", 176), (256, "serial", 80)]:
        assert entry(d, loop, block_n) == -1, (d, loop, block_n)
    for d, block_n in [(128, 176), (256, 80)]:
        for causal in (0, 1):
            assert entry(d, "overlap", block_n, cluster=2, causal=causal) == -1, (d, causal)
    # folds: causal, the overlapped loop (two consumers), one CTA per cluster, 128-key tiles at d128
    assert entry(128, "overlap", 128, fold=1) == -2  # no causal mask
    assert entry(128, "serial", 176, causal=1, fold=1) == -2
    assert entry(128, "overlap", 128, causal=1, fold=2) == -2
    assert entry(128, "overlap", 176, causal=1, fold=1) == -2
    assert entry(256, "overlap", 80, causal=1, fold=1, cluster=2) == -2  # a fold is one CTA's
    for d, block_n in [(128, 128), (256, 80)]:
        assert entry(d, "overlap", block_n, causal=1, fold=1) == -1, (d, block_n)
    assert entry(128, "overlap", 176, causal=1, split_rounds=0) == -2  # a causal split's rounds: at least 1
    assert entry(128, "overlap", 176, causal=1, split_rounds=4) == -1


@needs_nvcc
def test_fp8_entry_point_checks_its_settings_before_any_launch():
    """As above for the FP8 entry: -2 for settings it has no kernel for, -1 (the misaligned q8's tensor map) for
    those it has."""
    entry = entry_fp8

    # d64: 128-key tiles, two or three consumers, either loop, one CTA, causal folds overlapped, no windows
    for loop, consumers, causal in itertools.product(("serial", "overlap"), (2, 3), (0, 1)):
        assert entry(64, loop, consumers, 128, causal=causal) == -1, (loop, consumers, causal)
    assert entry(64, "overlap", 2, 256) == -2
    assert entry(64, "overlap", 2, 128, cluster=2) == -2
    for consumers in (2, 3):
        assert entry(64, "overlap", consumers, 128, causal=1, fold=1) == -1, consumers
        assert entry(64, "overlap", consumers, 128, fold=1) == -2, consumers  # folds are causal
        assert entry(64, "serial", consumers, 128, causal=1, fold=1) == -2, consumers
    assert entry(64, "overlap", 2, 128, causal=1, window_left=7) == -2
    assert entry(256, "serial", 3, 128) == -2  # three consumers: d128 only
    assert entry(128, "overlap", 3, 128) == -2  # three consumers in order only
    assert entry(256, "serial", 2, 256) == -2  # 256-key tiles: d128 only
    assert entry(128, "overlap", 2, 128, cluster=3) == -2
    assert entry(128, "serial", 2, 128, cluster=2) == -2  # two consumers pair in the overlapped loop only
    assert entry(128, "serial", 2, 256, cluster=2) == -2
    for d, loop, consumers, block_n in [(128, "overlap", 2, 128), (256, "serial", 2, 128), (128, "serial", 3, 128),
                                        (128, "serial", 2, 256)]:
        assert entry(d, loop, consumers, block_n) == -1, (d, loop, consumers, block_n)
    for d, loop, consumers in [(128, "overlap", 2), (256, "overlap", 2), (128, "serial", 3)]:
        for causal in (0, 1):
            assert entry(d, loop, consumers, 128, cluster=2, causal=causal) == -1, (d, loop, consumers, causal)
    # folds: causal, 128-key tiles, two consumers overlapped or three in order
    for d, loop, consumers, block_n, causal in [(128, "overlap", 2, 128, 0), (128, "serial", 2, 128, 1),
                                                (128, "serial", 2, 256, 1), (256, "serial", 3, 128, 1)]:
        assert entry(d, loop, consumers, block_n, causal=causal, fold=1) == -2, (d, loop, consumers, block_n)
    assert entry(128, "overlap", 2, 128, causal=1, fold=1, cluster=2) == -2
    for d, loop, consumers in [(128, "overlap", 2), (256, "overlap", 2), (128, "serial", 3)]:
        assert entry(d, loop, consumers, 128, causal=1, fold=1) == -1, (d, loop, consumers)
    assert entry(128, "serial", 3, 128, causal=1, split_rounds=0) == -2
    assert entry(128, "serial", 3, 128, causal=1, split_rounds=4) == -1


@needs_nvcc
def test_entry_points_take_windows_on_their_window_settings_only():
    """A sliding window (window_left >= 0) gets as far as the tensor maps with attention_sm90.WINDOW_SETTINGS, causal;
    -2 without a causal mask, in pairs, in folds, on other settings, or for window_left < -1."""
    for (d, fp8), settings in attention_sm90.WINDOW_SETTINGS.items():
        loop, consumers = settings["loop"], settings["consumers"]
        block_n = settings.get("block_n", 128)
        assert settings["cluster"] == 1 and settings["split"] is False
        if fp8:
            entry = functools.partial(entry_fp8, d, loop, consumers, block_n)
        else:
            entry = functools.partial(entry_16bit, d, loop, block_n, consumers=consumers)
        for left in (0, 4095):
            assert entry(causal=1, window_left=left) == -1, (d, fp8, left)
        assert entry(causal=0, window_left=7) == -2, (d, fp8)
        assert entry(causal=1, window_left=-2) == -2, (d, fp8)
        assert entry(causal=1, cluster=2, window_left=7) == -2, (d, fp8)
        assert entry(causal=1, fold=1, window_left=7) == -2, (d, fp8)
    assert entry_16bit(128, "overlap", 176, causal=1, window_left=7) == -2  # not the window's settings
    assert entry_fp8(128, "overlap", 2, 128, causal=1, window_left=7) == -2


@needs_nvcc
@pytest.mark.parametrize("block_m,block_n", [(192, 128), (128, 128), (128, 80)])
def test_window_tiles_hold_every_visible_key_and_are_whole_only_where_every_row_sees_them(ptxas_report, block_m,
                                                                                            block_n):
    # tile_at's WINDOW view (run on the host) against the keys each row sees: a row block's tiles start at a tile
    # boundary at or before its first row's first key and reach its last row's last; each warpgroup of 64 rows skips
    # the tiles before `first`, which hold no key its rows see (tile `first` holds one), and runs the tiles from `lo`
    # to the block's masked diagonal (n_full) unmasked, which hold only keys every one of its rows sees
    rng = random.Random(block_m * block_n)
    lib = cuda_build.load()
    warpgroups = block_m // 64
    for _ in range(40):
        seqlen_q, seqlen_k = rng.randint(1, 1200), rng.randint(0, 1500)
        left = rng.choice([0, 1, block_n - 1, block_n, rng.randint(0, 1500)])
        m_blocks = -(-seqlen_q // block_m)
        out = [(ctypes.c_int * m_blocks)() for _ in range(3)] + [(ctypes.c_int * (m_blocks * warpgroups))()
                                                                  for _ in range(2)]
        assert lib.fa3fp8_window_tiles(block_m, block_n, seqlen_q, seqlen_k, left, m_blocks, *out) == 0
        key0, n_tiles, n_full, first, lo = ([int(x) for x in a] for a in out)
        rows = torch.arange(seqlen_q)[:, None] + seqlen_k - seqlen_q  # each query's own key
        keys = torch.arange(seqlen_k)[None, :]
        visible = (keys <= rows) & (keys >= rows - left)
        case = (seqlen_q, seqlen_k, left)
        for m in range(m_blocks):
            block = visible[m * block_m : (m + 1) * block_m]
            seen = block.any(0).nonzero().flatten()
            begin, end = key0[m], key0[m] + n_tiles[m] * block_n
            assert key0[m] % block_n == 0, case
            if seen.numel() == 0:
                continue
            assert begin <= seen.min() < begin + block_n and end - block_n <= seen.max() < end, (case, m)
            for c in range(warpgroups):
                mine = block[c * 64 : (c + 1) * 64]
                seen = mine.any(0).nonzero().flatten()
                i = m * warpgroups + c
                assert lo[i] % block_n == 0 and first[i] * block_n <= lo[i], (case, m, c)
                if seen.numel() == 0:
                    continue
                assert begin + first[i] * block_n <= seen.min() < begin + (first[i] + 1) * block_n, (case, m, c)
                window_starts = rows[m * block_m + c * 64 : m * block_m + (c + 1) * 64, 0] - left
                assert begin + lo[i] >= window_starts.max(), (case, m, c)  # no key from lo on lies left of a window
                for tile in range(lo[i] // block_n, n_tiles[m]):
                    start = begin + tile * block_n
                    if tile * block_n < n_full[m]:
                        assert mine[:, start : start + block_n].all() and start + block_n <= seqlen_k, (case, m, c)


def test_windows_run_this_kernel_at_its_head_dims_unless_the_triton_kernel_is_asked(monkeypatch):
    # FA3FP8_KERNEL=auto and =cuda run d128's and d256's windows here (timed ahead of the Triton kernel), =triton
    # none; d64 has no window kernel, and without the library the Triton kernel serves them all
    monkeypatch.setattr(cuda_build, "available", lambda: True)
    for choice, served in [("auto", True), ("cuda", True), ("triton", False)]:
        monkeypatch.setenv("FA3FP8_KERNEL", choice)
        assert attention_sm90.serves_windows(128) is attention_sm90.serves_windows(256) is served, choice
        assert not attention_sm90.serves_windows(64)
    monkeypatch.setattr(cuda_build, "available", lambda: False)
    monkeypatch.setenv("FA3FP8_KERNEL", "auto")
    assert not attention_sm90.serves_windows(128) and not attention_sm90.serves_windows(256)


@needs_nvcc
def test_split_units_splits_a_last_round_that_leaves_ctas_idle():
    split_units = cuda_build.load().fa3fp8_split_units
    assert split_units(1056, 66, 94, 0) == 0  # whole rounds
    assert split_units(1024, 66, 94, 0) == 34  # S16K BF16 d128 in pairs: 15 rounds and 34 of 66 pairs
    assert split_units(16, 132, 100, 0) == 16  # fewer units than CTAs
    assert split_units(252, 132, 12, 0) == 0  # a segment of 11 of 12 key tiles saves too little
    assert split_units(252, 132, 40, 0) == 0  # 120 of 132: 37 of 40 key tiles
    assert split_units(140, 132, 40, 0) == 8
    # folds pay up to four segments a share: S4K FP8 d128 causal, 1024 folds of 33 key tiles (two consumers) saves
    # too little, 704 folds of 34 (three consumers) enough; S16K three consumers, 688 folds of 130
    assert split_units(1024, 132, 33, 0) == 100 and split_units(1024, 132, 33, 1) == 0
    assert split_units(704, 132, 34, 1) == 44
    assert split_units(688, 132, 130, 1) == 28


@needs_nvcc
def test_split_parts_cut_the_units_of_a_causal_launchs_last_round_into_as_many_equal_parts_as_fit_it():
    split_parts = cuda_build.load().fa3fp8_split_parts
    assert split_parts(32, 132, 745) == 4  # one query, 32 heads over 131072 keys: 128 of 132 CTAs
    assert split_parts(32, 66, 1024) == 2  # 256 queries, two row blocks of each head in pairs
    assert split_parts(64, 66, 1024) == 0  # 512 queries in pairs: one part each already fills 64 of 66 pairs
    assert split_parts(160, 66, 1024) == 2  # 1280 queries in pairs: 2 rounds, and 28 pairs left, 2 parts each
    assert split_parts(133, 132, 1024) == 132  # a round, and one unit over every CTA
    assert split_parts(264, 132, 1024) == 0  # whole rounds
    assert split_parts(0, 132, 1024) == 0
    assert split_parts(16, 132, 9) == 0  # 8 parts of 2 of 9 key tiles save 7 ...
    assert split_parts(16, 132, 10) == 8  # ... of 10, 8: worth it from SPLIT_MIN_SAVING on
    assert split_parts(40, 132, 15) == 3 and split_parts(40, 132, 11) == 0  # 5 of 15 saves 10, 4 of 11 saves 7


def causal_split(work_tiles, m_blocks, shares, cluster, split_rounds, block_m, seqlen_q, seqlen_k, equal=True,
                 block_n=128):
    """The C library's causal_split: (the first work tile cut, parts), (work_tiles, 0) when nothing is cut."""
    first = ctypes.c_int()
    parts = cuda_build.load().fa3fp8_causal_split(work_tiles, m_blocks, shares, cluster, split_rounds, block_m,
                                                  block_n, seqlen_q, seqlen_k, int(equal), ctypes.byref(first))
    return (first.value, parts) if parts else (work_tiles, 0)


@needs_nvcc
def test_causal_split_cuts_the_last_round_of_a_launch_of_at_most_split_rounds_rounds():
    # 1280 queries of 32 heads over 131072 keys, two consumers in pairs: 10 row blocks a head, 320 work tiles, 160
    # pairs on 66: two rounds, then the last 28 pairs (56 work tiles) in 2 parts each, where 3 rounds are allowed
    assert causal_split(320, 10, 66, 2, 1, 128, 1280, 131072) == (320, 0)
    assert causal_split(320, 10, 66, 2, 2, 128, 1280, 131072) == (320, 0)
    assert causal_split(320, 10, 66, 2, 3, 128, 1280, 131072) == (264, 2)
    # fewer work tiles than CTAs: all of them, as many parts as fit one round (split_rounds 1 or more)
    for split_rounds in (1, 4):
        assert causal_split(32, 1, 132, 1, split_rounds, 128, 1, 131072) == (0, 4)
    # 640 queries alone: 5 row blocks a head, 160 work tiles on 132 CTAs, the last 28 in 4 parts
    assert causal_split(160, 5, 132, 1, 2, 128, 640, 131072) == (132, 4)
    assert causal_split(264, 5, 132, 1, 4, 128, 640, 131072) == (264, 0)  # whole rounds


@needs_nvcc
def test_causal_split_counts_the_key_tiles_of_the_longest_work_tile_cut():
    # one head of 16384 queries and keys (causal from the diagonal), 128-row blocks: 128 work tiles on 100 CTAs, the
    # last 28 (row blocks 27 down to 0, 28 key tiles at most) in 3 parts: saves 18 key tiles
    assert causal_split(128, 128, 100, 1, 2, 128, 16384, 16384) == (100, 3)
    # ... where row blocks 9 down to 0 (10 key tiles at most), the last 10 of 110 work tiles, in 10 parts save 9
    assert causal_split(110, 110, 100, 1, 2, 128, 14080, 14080) == (100, 10)
    # ... and 8 of 108 (row blocks 7 to 0) save 7 of 8 key tiles: too little; the longest sequence's bound (110 key
    # tiles), not knowing the lengths, would cut them
    assert causal_split(108, 108, 100, 1, 2, 128, 13824, 13824) == (108, 0)
    assert causal_split(108, 108, 100, 1, 2, 128, 13824, 13824, equal=False) == (100, 12)
    # 16 heads of 10 row blocks at 1280 queries and keys: the last 23 of 160 work tiles on 137 CTAs start at head
    # 13's row block 2 (3 key tiles) and take in heads 14 and 15, whose row block 9 sees 10: 5 parts save 8
    assert causal_split(160, 10, 137, 1, 2, 128, 1280, 1280) == (137, 5)
    # pairs see their later block's key tiles: 2 heads of 4 row blocks in pairs, 8 work tiles, 4 pairs on 3; the last
    # pair (row blocks 1 and 0) sees 2 key tiles of 128 at 512 queries and keys: too few to cut
    assert causal_split(8, 4, 3, 2, 2, 128, 512, 512) == (8, 0)
    assert causal_split(8, 4, 3, 2, 2, 128, 512, 512 + 8192) == (6, 3)


@needs_nvcc
@pytest.mark.parametrize("first,units,parts,cluster,seed", [(0, 32, 4, 1, 0), (0, 32, 2, 2, 1), (132, 28, 4, 1, 2),
                                                             (264, 28, 2, 2, 3), (7, 3, 5, 1, 4)])
def test_causal_items_cover_each_cut_work_tile_once_and_the_merge_finds_them(first, units, parts, cluster, seed):
    # the kernel's causal split: items x of grid - first, each part of a work tile from `first` on; a unit's parts
    # adjacent; merge_segments reads each work tile's parts at the items that wrote them
    rng = random.Random(seed)
    tiles, items = units * cluster, units * parts * cluster
    n_tiles = (ctypes.c_int * tiles)(*(rng.randrange(0, 200) for _ in range(tiles)))
    tile, begin, end = ((ctypes.c_int * items)() for _ in range(3))
    slot = (ctypes.c_int * (tiles * parts))()
    cuda_build.load().fa3fp8_causal_items(first, units, parts, cluster, n_tiles, tile, begin, end, slot)
    for i in range(tiles):
        mine = sorted((begin[x], end[x], x) for x in range(items) if tile[x] == first + i)
        assert [b for b, _, _ in mine] == [0] + [e for _, e, _ in mine[:-1]] and mine[-1][1] == n_tiles[i]
        assert len(mine) == parts and sorted(slot[i * parts + c] for c in range(parts)) == sorted(x for *_, x in mine)
        assert all(x // (cluster * parts) == i // cluster for *_, x in mine)  # the unit's parts are adjacent
    for x in range(items):  # a part's keys differ from the next part's by at most one key tile
        assert abs((end[x] - begin[x]) - n_tiles[tile[x] - first] / parts) < 1


@needs_nvcc
def test_split_workspace_holds_two_segments_of_o_and_lse_per_cta_four_with_folds():
    # what attention_sm90._split_workspace allocates and plan_split requires: fp32 O (rows x d) and lse (rows)
    workspace_bytes = cuda_build.load().fa3fp8_split_workspace_bytes
    assert workspace_bytes(132, 192, 128, 0) == 2 * 132 * 192 * (128 + 1) * 4
    assert workspace_bytes(132, 192, 128, 1) == 4 * 132 * 192 * (128 + 1) * 4

    # the launchers ask once per library and launch shape; kernels that do not split get none (a null pointer)
    library = cuda_build.load()
    assert attention_sm90._workspace_bytes(library, 132, 192, 128, False, False) == workspace_bytes(132, 192, 128, 0)
    assert attention_sm90._workspace_bytes(library, 132, 128, 256, False, False) == 0  # BF16/FP16 d256 (splits_tail)
    assert attention_sm90._workspace_bytes(library, 132, 128, 256, True, True) == workspace_bytes(132, 128, 256, 1)


def test_split_workspace_size_is_asked_once_per_library_and_shape():
    class Library:  # counts the questions, as a kernel library that splits every (d, fp8) would answer them
        def __init__(self):
            self.asked = 0

        def fa3fp8_splits_tail(self, d, fp8):
            self.asked += 1
            return 1

        def fa3fp8_split_workspace_bytes(self, sms, block_m, d, fold):
            self.asked += 1
            return sms * block_m * d * (1 + fold)

    first, second = Library(), Library()
    for _ in range(3):
        assert attention_sm90._workspace_bytes(first, 132, 192, 128, True, False) == 132 * 192 * 128
    assert attention_sm90._workspace_bytes(first, 132, 192, 128, True, True) == 2 * 132 * 192 * 128
    assert attention_sm90._workspace_bytes(second, 132, 192, 128, True, False) == 132 * 192 * 128
    assert (first.asked, second.asked) == (4, 2)


def test_planned_settings_are_best_settings_worked_out_once_per_shape_and_library(monkeypatch):
    asked = []

    def best_settings(*args):
        asked.append(args)
        return {"consumers": len(asked)}

    monkeypatch.setattr(attention_sm90, "best_settings", best_settings)
    monkeypatch.setattr(cuda_build, "available", lambda: True)
    shape = (128, True, True, 4093, False, (32, 4093, 132))  # a shape no other test plans
    for library in ("first", "second"):
        monkeypatch.setattr(cuda_build, "load", lambda library=library: library)
        for _ in range(3):
            assert attention_sm90.planned_settings(*shape) == {"consumers": 1 if library == "first" else 2}
    assert asked == [shape, shape]


def tail_segments(units, key_tiles, grid, cluster):
    """The C library's tail split (fa3fp8_tail_segments): (share, unit, begin, end) of each segment, and each unit's
    (first, last) share, those the merge reads."""
    shares = grid // cluster
    unit, begin, end = ((ctypes.c_int * (2 * shares))() for _ in range(3))
    first, last = ((ctypes.c_int * units)() for _ in range(2))
    cuda_build.load().fa3fp8_tail_segments(units, key_tiles, grid, cluster, unit, begin, end, first, last)
    segments = [(i % shares, unit[i], begin[i], end[i]) for i in range(2 * shares) if unit[i] >= 0]
    return segments, list(zip(first, last))


@needs_nvcc
@pytest.mark.parametrize("units,key_tiles,grid,cluster",
                         [(34, 94, 132, 2), (50, 205, 132, 1), (2, 372, 132, 2), (1, 20, 132, 1), (64, 23, 132, 1),
                          (3, 5, 16, 2), (131, 1000, 132, 1)])
def test_tail_segments_cover_each_unit_once_in_even_shares(units, key_tiles, grid, cluster):
    segments, unit_shares = tail_segments(units, key_tiles, grid, cluster)
    for u, (first, last) in enumerate(unit_shares):
        ranges = sorted((begin, end) for _, unit, begin, end in segments if unit == u)
        assert ranges[0][0] == 0 and ranges[-1][1] == key_tiles, u
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges)), u  # no gap, no overlap
        covering = sorted(c for c, unit, _, _ in segments if unit == u)
        assert covering[0] == first and covering[-1] == last, u  # the merge finds them all among first .. last
    shares = grid // cluster
    per_share = [sum(end - begin for c, _, begin, end in segments if c == share) for share in range(shares)]
    assert max(per_share) <= -(-units * key_tiles // shares) and sum(per_share) == units * key_tiles


def fold_key_tiles(m_blk, m_blocks, block_m, seqlen_q, seqlen_k, block_n=128):
    """Key tiles of causal row block m_blk (bottom-right aligned) of m_blocks that end where the queries end (their
    first rows whole warpgroups before the first query), 0 for a block without queries."""
    lead = m_blocks * block_m - -(-seqlen_q // 64) * 64
    first, end = m_blk * block_m - lead, (m_blk + 1) * block_m - lead  # rows [first, end) of the block
    if first >= seqlen_q or end <= 0:
        return 0
    visible = max(min(seqlen_k, end + seqlen_k - seqlen_q), 0)
    return -(-visible // block_n)


@needs_nvcc
@pytest.mark.parametrize("block_m,seqlen_q,seqlen_k", [(192, 16384, 16384), (128, 4096, 4096), (192, 3000, 3000),
                                                       (192, 2048, 2048), (128, 1000, 5000), (192, 3000, 1000),
                                                       (128, 1, 777)])
def test_fold_key_tiles_bounds_every_fold(block_m, seqlen_q, seqlen_k):
    # plan_split's bound on a fold's iterations: the most key tiles of any fold (row blocks m - 1 - f and f)
    m = -(-seqlen_q // (2 * block_m)) * 2
    tiles = [fold_key_tiles(m_blk, m, block_m, seqlen_q, seqlen_k) for m_blk in range(m)]
    folds = [tiles[m - 1 - f] + tiles[f] for f in range(m // 2)]
    assert cuda_build.load().fa3fp8_fold_key_tiles(block_m, m, seqlen_q, seqlen_k) == max(folds)
    if seqlen_q == seqlen_k:  # blocks that end where the queries do: folds within a key tile of each other
        assert max(folds) - min(folds) <= 1, folds


def fold_segments(n_long, n_short, key_tiles, grid):
    """The C library's fold split (fa3fp8_fold_segments): (share, work tile, begin, end) of each tail item, and the
    workspace slots (tail items) that the merge reads for each work tile."""
    units = len(n_long)
    ints = ctypes.c_int * units
    tile, begin, end = ((ctypes.c_int * (4 * grid))() for _ in range(3))
    slots, n_slots = (ctypes.c_int * (2 * units * grid))(), (ctypes.c_int * (2 * units))()
    cuda_build.load().fa3fp8_fold_segments(units, key_tiles, grid, ints(*n_long), ints(*n_short), tile, begin, end,
                                           slots, n_slots)
    items = [(x // 2 % grid, tile[x], begin[x], end[x], x) for x in range(4 * grid) if tile[x] >= 0]
    return items, [list(slots[i * grid:i * grid + n_slots[i]]) for i in range(2 * units)]


@needs_nvcc
@pytest.mark.parametrize("units,grid,seed", [(28, 132, 0), (44, 132, 1), (1, 132, 2), (131, 132, 3), (5, 16, 4)])
def test_fold_segments_cover_each_work_tile_once_and_the_merge_finds_them(units, grid, seed):
    rng = random.Random(seed)
    key_tiles = rng.randrange(20, 200)
    n_long = [rng.randrange(key_tiles // 2, key_tiles + 1) for _ in range(units)]
    n_short = [rng.randrange(0, key_tiles - n + 1) for n in n_long]  # a fold's two tiles fit its bound
    n_long[0], n_short[0] = 0, 0  # a fold without keys (rows that see none): no segment, the merge writes zeros
    items, slots = fold_segments(n_long, n_short, key_tiles, grid)
    for i in range(2 * units):
        n = (n_long if i % 2 == 0 else n_short)[i // 2]
        ranges = sorted((begin, end) for _, tile, begin, end, _ in items if tile == i)
        assert sum(end - begin for begin, end in ranges) == n, i
        if n:
            assert ranges[0][0] == 0 and ranges[-1][1] == n, i
            assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges)), i  # no gap, no overlap
        assert sorted(slots[i]) == sorted(x for _, tile, _, _, x in items if tile == i), i  # each segment once
    per_share = [sum(end - begin for c, _, begin, end, _ in items if c == share) for share in range(grid)]
    assert max(per_share) <= -(-units * key_tiles // grid)


# ------------------------------------------------------------------------------------------ on the GPU

CASES = [  # sequence lengths of q and k per batch entry, heads, kv_heads, d, causal
    ([1000, 1000], [1000, 1000], 8, 2, 128, True),
    ([1000, 1000], [1000, 1000], 8, 2, 128, False),
    ([1, 17, 300, 1024, 777], [1, 17, 300, 1024, 777], 8, 2, 128, True),
    ([100, 64], [1000, 700], 8, 1, 128, True),  # chunked prefill: bottom-right alignment
    ([300, 5], [120, 0], 4, 4, 128, True),  # more queries than keys, and a sequence with no keys
    ([17], [33], 64, 8, 128, False),  # GQA 8:1, odd lengths
    ([1], [777], 16, 2, 128, True),  # decode-shaped
    ([257, 129], [257, 129], 4, 1, 256, False),
    ([1536], [1536], 2, 2, 256, True),
    # more work tiles than SMs: without a causal mask each persistent CTA runs several, some past their sequence's
    # end; causal, one CTA per work tile
    ([4000, 3000, 129, 1], [4000, 3000, 129, 1], 16, 4, 128, True),
    ([3000, 129, 1], [3000, 129, 1], 16, 4, 128, False),
    ([2000, 300, 5], [2000, 0, 64], 16, 4, 128, False),  # a sequence with no keys among a CTA's work tiles
    ([2500, 700], [2500, 900], 16, 8, 256, False),
    # a last key tile of at most 16 keys: 4096 = 51 x 80 + 16, 161 = 2 x 80 + 1, 192 = 176 + 16 (d128's 176-key tiles)
    ([4096, 161, 192], [4096, 161, 192], 4, 2, 256, False),
    ([4096, 161, 192], [4096, 161, 192], 4, 2, 128, False),
    # pairs whose last pair is partly filled: 100 rows (two warpgroups), 1100 (76 rows past 1024 for
    # 128-row blocks), 4096 (256 rows past 3840 for 192-row blocks: S4K's)
    ([100, 1100, 4096], [100, 1100, 4096], 8, 2, 128, False),
    # without a causal mask, fewer work tiles than SMs, or a last round of a few: split along the keys (the kernel's
    # plan_split), where a sequence shorter than the longest leaves some segments no keys
    ([1024, 200], [4000, 1500], 4, 2, 128, False),
    ([2048], [6000], 9, 3, 128, False),
    ([2048], [6000], 9, 3, 256, False),
    # folds of sequences of one length whose last round splits along the keys: self-attention, a chunk of queries
    # late in the keys (bottom-right), and more queries than keys (the first rows see none)
    ([3000, 3000], [3000, 3000], 12, 4, 128, True),
    ([1000], [5000], 16, 2, 128, True),
    ([3000], [1900], 16, 4, 128, True),
    ([2500], [2500], 8, 8, 256, True),
    # causal, fewer work tiles than SMs: every work tile split along the keys, the diagonal's segments (bottom-right)
    # past some rows' last keys
    ([37, 200], [9000, 5000], 8, 2, 128, True),
    ([100], [7000], 6, 3, 256, True),
]


def assert_16bit_matches_fp64(out, lse, q, k, v, cu_q, cu_k, scale, causal):
    """FlashAttention-3's error rule: out within twice PyTorch's own error in q's dtype (+ 1e-3) of fp64, lse within
    1e-3; rows that see no key give zeros and lse = -inf."""
    ref, ref_lse = attention_varlen_reference(q, k, v, cu_q, cu_k, scale, causal, compute_dtype=torch.float64)
    same_precision, _ = attention_varlen_reference(q, k, v, cu_q, cu_k, scale, causal, compute_dtype=q.dtype)
    assert out.dtype == q.dtype and torch.isfinite(out).all()
    torch_err = (same_precision.double() - ref).abs().max().item()
    assert (out.double() - ref).abs().max().item() <= 2 * torch_err + 1e-3
    masked = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), masked)
    assert (lse.double() - ref_lse)[~masked].abs().max().item() <= 1e-3
    assert (out[masked.T] == 0).all()  # rows that see no key are zeros


D64_CASES = [  # lengths of q and k per batch entry, heads, kv_heads, causal (d64: no pairs; split only with the switch)
    ([1000, 1000], [1000, 1000], 8, 2, True),
    ([1, 17, 300, 1024, 777], [1, 17, 300, 1024, 777], 8, 2, False),
    ([100, 64], [1000, 700], 8, 1, True),  # chunked prefill: bottom-right alignment
    ([300, 5], [120, 0], 4, 4, True),  # more queries than keys, and a sequence with no keys
    ([17], [33], 64, 8, False),  # GQA 8:1, odd lengths
    ([4000, 3000, 129, 1], [4000, 3000, 129, 1], 16, 4, True),  # more work tiles than SMs
    ([2000, 300, 5], [2000, 0, 64], 16, 4, False),  # persistent CTAs past a sequence's end and over one without keys
]
# d64's launcher settings (loop, consumers, fold): either loop on two or three consumers, and causal folds overlapped
D64_SETTINGS = [("serial", 2, False), ("overlap", 2, False), ("serial", 3, False), ("overlap", 3, False),
                ("overlap", 2, True), ("overlap", 3, True)]


def _packed(lens, heads, d, gen):
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    return torch.randn(sum(lens), heads, d, device="cuda", generator=gen).to(torch.bfloat16), cu


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("loop,consumers,block_n,cluster,fold",
                         [("overlap", 2, 128, 1, False), ("serial", 2, 128, 1, False), ("serial", 3, 128, 1, False),
                          ("serial", 2, 256, 1, False), ("overlap", 2, 128, 2, False), ("serial", 3, 128, 2, False),
                          ("overlap", 2, 128, 1, True), ("serial", 3, 128, 1, True)],
                         ids=["overlap", "serial", "serial-3wg", "serial-256", "overlap-pairs", "serial-3wg-pairs",
                              "overlap-fold", "serial-3wg-fold"])
@pytest.mark.parametrize("lens_q,lens_k,heads,kv_heads,d,causal", CASES,
                         ids=[f"q{'_'.join(map(str, c[0]))}-k{'_'.join(map(str, c[1]))}-H{c[2]}-KV{c[3]}-D{c[4]}"
                              f"-{'causal' if c[5] else 'full'}" for c in CASES])
def test_matches_reference_fp8_math(lens_q, lens_k, heads, kv_heads, d, causal, loop, consumers, block_n, cluster,
                                    fold):
    if (consumers == 3 or block_n == 256) and d != 128:
        pytest.skip("three consumer warpgroups and 256-key tiles exist at d128 only")
    if fold and not causal:
        pytest.skip("folds are of causal row blocks")
    assert_fp8_matches_reference(lens_q, lens_k, heads, kv_heads, d, causal, loop=loop, consumers=consumers,
                                 block_n=block_n, cluster=cluster, fold=fold)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("loop,consumers,fold", D64_SETTINGS,
                         ids=["serial", "overlap", "serial-3wg", "overlap-3wg", "overlap-fold", "overlap-3wg-fold"])
@pytest.mark.parametrize("lens_q,lens_k,heads,kv_heads,causal", D64_CASES,
                         ids=[f"q{'_'.join(map(str, c[0]))}-k{'_'.join(map(str, c[1]))}-H{c[2]}-KV{c[3]}"
                              f"-{'causal' if c[4] else 'full'}" for c in D64_CASES])
def test_fp8_d64_matches_reference_fp8_math(lens_q, lens_k, heads, kv_heads, causal, loop, consumers, fold):
    if fold and not causal:
        pytest.skip("folds are of causal row blocks")
    assert_fp8_matches_reference(lens_q, lens_k, heads, kv_heads, 64, causal, loop=loop, consumers=consumers,
                                 fold=fold)


def assert_fp8_matches_reference(lens_q, lens_k, heads, kv_heads, d, causal, **settings):
    """The FP8 kernel with these launcher settings on random packed sequences: against the reference's FP8 math on the
    same bundle (the kernel at most as far from fp64 as that math, and closer to it than to fp64) and its LSE, masked
    rows zeros."""
    gen = torch.Generator(device="cuda").manual_seed(sum(lens_q) + d)
    q, cu_q = _packed(lens_q, heads, d, gen)
    k, cu_k = _packed(lens_k, kv_heads, d, gen)
    v, _ = _packed(lens_k, kv_heads, d, gen)
    q_block = 128 if d == 256 else 64
    b = quantize_qkv_reference(q, k, v, cu_q, cu_k, q_block, attention_sm90.KV_BLOCK)
    v8t = permute_v_keys(b.v8t)
    # a tile's block past its sequence's last must not read the columns or scales past the bundle's last block
    # (unset by quantize_qkv, NaN here)
    used = int(b.cu_blocks_k[-1])
    v8t.view(torch.uint8)[..., used * attention_sm90.KV_BLOCK:] = 0x7F
    k_scale, v_scale = (torch.full((s.shape[0], used + 1), float("nan"), device="cuda") for s in (b.k_scale, b.v_scale))
    k_scale[:, :used], v_scale[:, :used] = b.k_scale[:, :used], b.v_scale[:, :used]
    scale = d**-0.5
    poison_cuda_cache()
    out, lse = attention_sm90.attention_fp8_fwd_sm90(
        b.q8, b.k8, v8t, cu_q, cu_k, max(lens_q), scale, causal, b.q_scale, k_scale, v_scale,
        b.cu_blocks_q, b.cu_blocks_k, q_block, torch.bfloat16, **settings,
    )
    ref8, lse8 = attention_fp8_reference(b, scale, causal)
    ref, ref_lse = attention_varlen_reference(q, k, v, cu_q, cu_k, scale, causal, compute_dtype=torch.float64)
    assert torch.isfinite(out).all()
    # the kernel rounds P against a running max and in units of the largest V scale (the reference: the final max,
    # each tile's own V scale), so the two differ by P's rounding alone; neither is the less accurate
    fp8_err = rmse(ref8, ref)
    assert rmse(out, ref) <= 1.1 * fp8_err + 1e-4
    assert rmse(out, ref8) <= 0.8 * fp8_err + 1e-4
    masked = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), masked)
    assert (lse.double() - lse8.double())[~masked].abs().max().item() <= 2e-2
    assert (out[masked.T] == 0).all()  # rows that see no key are zeros


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("loop,block_n,cluster,fold,consumers",
                         [("serial", None, 1, False, 2), ("overlap", None, 1, False, 2), ("overlap", 128, 1, False, 2),
                          ("overlap", None, 2, False, 2), ("overlap", 128, 2, False, 2), ("overlap", None, 1, True, 2),
                          ("overlap", 128, 1, True, 2), ("serial", 128, 1, False, 3), ("serial", 128, 2, False, 3),
                          ("serial", 128, 1, True, 3)],
                         ids=["serial", "overlap", "overlap-128", "overlap-pairs", "overlap-128-pairs", "overlap-fold",
                              "overlap-128-fold", "serial-3wg", "serial-3wg-pairs", "serial-3wg-fold"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("lens_q,lens_k,heads,kv_heads,d,causal", CASES,
                         ids=[f"q{'_'.join(map(str, c[0]))}-k{'_'.join(map(str, c[1]))}-H{c[2]}-KV{c[3]}-D{c[4]}"
                              f"-{'causal' if c[5] else 'full'}" for c in CASES])
def test_16bit_matches_fp64_reference(lens_q, lens_k, heads, kv_heads, d, causal, dtype, loop, block_n, cluster,
                                      fold, consumers):
    if block_n is not None and block_n not in attention_sm90.BLOCK_N_16BIT[d]:
        pytest.skip(f"no {block_n}-key tiles at d{d}")
    if fold and not causal:
        pytest.skip("folds are of causal row blocks")
    if fold and d == 128 and block_n != 128:
        pytest.skip("folds at d128 run 128-key tiles")
    if cluster == 2 and block_n == 128 and causal and consumers == 2:
        pytest.skip("two consumers' 128-key pairs run without a causal mask")
    gen = torch.Generator(device="cuda").manual_seed(sum(lens_q) + d + 1)
    q, cu_q = _packed(lens_q, heads, d, gen)
    k, cu_k = _packed(lens_k, kv_heads, d, gen)
    v, _ = _packed(lens_k, kv_heads, d, gen)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    scale = d**-0.5
    poison_cuda_cache()
    out, lse = attention_sm90.attention_fwd_sm90(q, k, v, cu_q, cu_k, max(lens_q), scale, causal, loop=loop,
                                                 consumers=consumers, block_n=block_n, cluster=cluster, fold=fold)
    assert_16bit_matches_fp64(out, lse, q, k, v, cu_q, cu_k, scale, causal)




@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("loop,consumers,fold", D64_SETTINGS,
                         ids=["serial", "overlap", "serial-3wg", "overlap-3wg", "overlap-fold", "overlap-3wg-fold"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("lens_q,lens_k,heads,kv_heads,causal", D64_CASES,
                         ids=[f"q{'_'.join(map(str, c[0]))}-k{'_'.join(map(str, c[1]))}-H{c[2]}-KV{c[3]}"
                              f"-{'causal' if c[4] else 'full'}" for c in D64_CASES])
def test_16bit_d64_matches_fp64_reference(lens_q, lens_k, heads, kv_heads, causal, dtype, loop, consumers, fold):
    if fold and not causal:
        pytest.skip("folds are of causal row blocks")
    gen = torch.Generator(device="cuda").manual_seed(sum(lens_q) + 64)
    q, cu_q = _packed(lens_q, heads, 64, gen)
    k, cu_k = _packed(lens_k, kv_heads, 64, gen)
    v, _ = _packed(lens_k, kv_heads, 64, gen)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    scale = 64**-0.5
    poison_cuda_cache()
    out, lse = attention_sm90.attention_fwd_sm90(q, k, v, cu_q, cu_k, max(lens_q), scale, causal, loop=loop,
                                                 consumers=consumers, fold=fold)
    assert_16bit_matches_fp64(out, lse, q, k, v, cu_q, cu_k, scale, causal)


# packed sequences (queries, keys) and sliding windows (keys before the query's own): windows narrower and wider than
# a tile, starting mid-tile, a chunk of queries late in its keys, more queries than keys, and a sequence without keys
WINDOW_CASES = [
    ([3000, 129, 1], [3000, 129, 1], 0),
    ([3000, 129, 1], [3000, 129, 1], 100),
    ([3000, 700], [3000, 900], 1000),
    ([500, 300], [5000, 100], 2047),
    ([200, 64], [4000, 0], 300),
]


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("lens_q,lens_k,window_left", WINDOW_CASES, ids=[
    f"q{'_'.join(map(str, q))}-k{'_'.join(map(str, k))}-left{left}" for q, k, left in WINDOW_CASES])
def test_window_matches_reference(lens_q, lens_k, window_left, d, fp8):
    # the WINDOW kernels (attention_sm90.WINDOW_SETTINGS): 16-bit against fp64 by FlashAttention-3's rule, FP8 against
    # the reference's FP8 math on the same bundle
    gen = torch.Generator(device="cuda").manual_seed(sum(lens_q) + d + window_left)
    heads, kv_heads = 8, 2
    q, cu_q = _packed(lens_q, heads, d, gen)
    k, cu_k = _packed(lens_k, kv_heads, d, gen)
    v, _ = _packed(lens_k, kv_heads, d, gen)
    scale, window = d**-0.5, (window_left, -1)
    settings = attention_sm90.WINDOW_SETTINGS[(d, fp8)]
    poison_cuda_cache()
    if not fp8:
        out, lse = attention_sm90.attention_fwd_sm90(q, k, v, cu_q, cu_k, max(lens_q), scale, True,
                                                     window_left=window_left, **settings)
        ref, ref_lse = attention_varlen_reference(q, k, v, cu_q, cu_k, scale, True, compute_dtype=torch.float64,
                                                  window_size=window)
        same, _ = attention_varlen_reference(q, k, v, cu_q, cu_k, scale, True, compute_dtype=q.dtype,
                                             window_size=window)
        assert (out.double() - ref).abs().max().item() <= 2 * (same.double() - ref).abs().max().item() + 1e-3
        expected_lse, lse_atol = ref_lse, 1e-3
    else:
        q_block = 64 if d == 128 else 128
        b = quantize_qkv_reference(q, k, v, cu_q, cu_k, q_block, attention_sm90.KV_BLOCK)
        out, lse = attention_sm90.attention_fp8_fwd_sm90(
            b.q8, b.k8, permute_v_keys(b.v8t), cu_q, cu_k, max(lens_q), scale, True, b.q_scale, b.k_scale,
            b.v_scale, b.cu_blocks_q, b.cu_blocks_k, q_block, torch.bfloat16, window_left=window_left, **settings,
        )
        ref8, lse8 = attention_fp8_reference(b, scale, True, window_size=window)
        ref, ref_lse = attention_varlen_reference(q, k, v, cu_q, cu_k, scale, True, compute_dtype=torch.float64,
                                                  window_size=window)
        assert rmse(out, ref8) <= 0.8 * rmse(ref8, ref) + 1e-4
        # against the same bundle's FP8 math: over a narrow window the quantized scores alone move the lse from
        # fp64's by up to 0.16 (one key at window 0)
        expected_lse, lse_atol = lse8.double(), 2e-2
    assert torch.isfinite(out).all()
    masked = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), masked)
    assert (lse.double() - expected_lse)[~masked].abs().max().item() <= lse_atol
    assert (out[masked.T] == 0).all()


def _self_attention_inputs(lens, d, seed):
    """Packed random q, k, v of 4 heads for sequences of `lens` queries and keys each, their cu_seqlens, and each
    packed key's position in its sequence."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, cu = _packed(lens, 4, d, gen)
    k, _ = _packed(lens, 4, d, gen)
    v, _ = _packed(lens, 4, d, gen)
    return q, k, v, cu, torch.cat([torch.arange(n, device="cuda") for n in lens])


def _fp8_d128_self_attention(q, k, v, cu, max_len, scale, causal, settings):
    """The FP8 kernel on packed d128 q, k, v (queries and keys of the same lengths, cu) under `settings`, and its
    references: out, lse, the fp64 output, and the FP8 math's output and lse."""
    ref, _ = attention_varlen_reference(q, k, v, cu, cu, scale, causal, compute_dtype=torch.float64)
    b = quantize_qkv_reference(q, k, v, cu, cu, 64, attention_sm90.KV_BLOCK)
    out, lse = attention_sm90.attention_fp8_fwd_sm90(
        b.q8, b.k8, permute_v_keys(b.v8t), cu, cu, max_len, scale, causal, b.q_scale, b.k_scale, b.v_scale,
        b.cu_blocks_q, b.cu_blocks_k, 64, torch.bfloat16, **settings)
    ref8, lse8 = attention_fp8_reference(b, scale, causal)
    return out, lse, ref, ref8, lse8


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("fp8,settings", [
    (False, {"loop": "overlap"}), (False, {"loop": "serial"}), (False, {"loop": "overlap", "cluster": 2}),
    (True, {"loop": "overlap"}), (True, {"loop": "serial", "consumers": 3}),
    (True, {"loop": "serial", "consumers": 3, "cluster": 2})],
    ids=["bf16-overlap", "bf16-serial", "bf16-pairs", "fp8-overlap", "fp8-serial-3wg", "fp8-serial-3wg-pairs"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_row_max_that_jumps_far_from_tile_to_tile(fp8, settings, causal):
    # every 384 keys the keys' mean grows by 2.5, and with it each row's score by ~85 (~120 in base 2): the running
    # max moves far past its slack, and what O and l held is rescaled by less than 2^-100; smaller moves come with
    # the noise. At lse ~270 the FP8 wgmma's accumulation (fewer mantissa bits than fp32) leaves it up to 7.5e-4
    # of itself from the reference's (H200, every loop alike).
    lens, d = [1500, 700], 128
    q, k, v, cu, keys = _self_attention_inputs(lens, d, seed=7)
    q = (q.float() + 3).to(torch.bfloat16)
    k = (k.float() + 2.5 * (keys // 384)[:, None, None]).to(torch.bfloat16)
    scale = d**-0.5
    if fp8:
        out, lse, ref, ref8, lse8 = _fp8_d128_self_attention(q, k, v, cu, max(lens), scale, causal, settings)
        assert torch.isfinite(out).all()
        assert rmse(out, ref) <= 1.1 * rmse(ref8, ref) + 1e-4
        gap = (lse.double() - lse8.double()).abs()
        assert (gap - 1e-3 * lse8.double().abs()).max().item() <= 2e-2
    else:
        out, lse = attention_sm90.attention_fwd_sm90(q, k, v, cu, cu, max(lens), scale, causal, **settings)
        assert_16bit_matches_fp64(out, lse, q, k, v, cu, cu, scale, causal)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("fp8,settings", [
    (False, {"loop": "overlap"}), (False, {"loop": "serial", "consumers": 3, "block_n": 128}),
    (True, {"loop": "overlap"}), (True, {"loop": "serial", "consumers": 3}),
    (True, {"loop": "serial", "consumers": 3, "cluster": 2})],
    ids=["bf16-overlap", "bf16-serial-3wg", "fp8-overlap", "fp8-serial-3wg", "fp8-serial-3wg-pairs"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_rows_whose_scores_are_all_negative(fp8, settings, causal):
    # queries of positive entries against keys of one sign per 384 keys: the first sequence's rows see only negative
    # scores over their first 384 keys, then positive ones, then negative ones under a positive running max; the
    # second sequence's keys are all negative, so are its rows' scores and running max throughout
    lens, d = [1500, 700], 128
    q, k, v, cu, keys = _self_attention_inputs(lens, d, seed=11)
    q = (q.float().abs() * 0.3 + 0.2).to(torch.bfloat16)
    first = torch.arange(sum(lens), device="cuda") < lens[0]
    sign = torch.where(first & ((keys // 384) % 2 == 1), 1.0, -1.0)
    k = ((k.float().abs() * 0.3 + 0.2) * sign[:, None, None]).to(torch.bfloat16)
    scale = d**-0.5
    if fp8:
        out, lse, ref, ref8, lse8 = _fp8_d128_self_attention(q, k, v, cu, max(lens), scale, causal, settings)
        assert rmse(out, ref) <= 1.1 * rmse(ref8, ref) + 1e-4
        assert (lse.double() - lse8.double()).abs().max().item() <= 2e-2
    else:
        out, lse = attention_sm90.attention_fwd_sm90(q, k, v, cu, cu, max(lens), scale, causal, **settings)
        assert_16bit_matches_fp64(out, lse, q, k, v, cu, cu, scale, causal)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("lens_q,lens_k,heads,kv_heads,causal,settings",
                         [([2048], [6000], 9, 3, False, {}),
                          ([3000, 3000], [3000, 3000], 12, 4, True, {"fold": True, "block_n": 128}),
                          ([2048], [6000], 9, 3, False, {"loop": "serial", "consumers": 3, "block_n": 128}),
                          ([6000], [6000], 12, 4, True,
                           {"loop": "serial", "consumers": 3, "block_n": 128, "fold": True}),
                          ([100, 40], [20000, 9000], 16, 2, True, {}),
                          ([300, 40], [20000, 9000], 16, 2, True,
                           {"loop": "serial", "consumers": 3, "block_n": 128, "cluster": 2}),
                          ([640], [20000], 32, 8, True, {"split_rounds": 2}),
                          ([1280], [20000], 32, 8, True, {"split_rounds": 3})],
                         ids=["pairs", "folds", "three-consumers", "three-consumers-folds", "causal",
                              "causal-three-consumers-pairs", "causal-last-round", "causal-last-round-pairs"])
def test_split_last_round_changes_only_rounding(lens_q, lens_k, heads, kv_heads, causal, settings):
    # BF16 d128: more work tiles (pairs: 9 heads of 16 row blocks; folds: 2 x 12 heads of 12 folds, with three
    # consumers 12 heads of 16 folds of 192 rows) than SMs, the last round a few, or (three consumers: 9 heads of 11
    # row blocks of 192, one CTA each) fewer; causal, one CTA per work tile, fewer than SMs: 2 x 16 heads of a row
    # block of 128, each cut into 4 parts (three consumers in pairs: a pair of blocks of 192, 2 parts) of up to 20000
    # keys; causal over more rounds (split_rounds): 32 heads of 5 row blocks of 128, 160 work tiles, the last 28 in 4
    # parts, and of 10 in pairs, 160 pairs, the last 28 (on 66 pairs) in 2. Split along the keys and merged, the
    # output moves by rounding only (and does move: the split ran)
    assert_split_changes_only_rounding(128, lens_q, lens_k, heads, kv_heads, causal, settings)


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("lens_q,lens_k,heads,kv_heads,causal,settings",
                         [([2048], [6000], 9, 3, False, {"loop": "overlap", "consumers": 3}),
                          ([6000], [6000], 12, 4, True, {"loop": "overlap", "consumers": 3, "fold": True}),
                          ([4000], [4000], 4, 2, True, {"loop": "overlap", "consumers": 2, "fold": True}),
                          ([100, 40], [20000, 9000], 16, 2, True, {}),
                          ([1280], [20000], 32, 8, True, {"split_rounds": 3})],
                         ids=["full", "folds", "two-consumer-folds", "causal", "causal-last-round"])
def test_d64_split_changes_only_rounding(lens_q, lens_k, heads, kv_heads, causal, settings):
    # d64: 9 heads of 11 row blocks of 192 without a mask (99 CTAs); causal folds of three consumers, 12 heads of 16
    # folds (1.45 rounds), and of two, 4 heads of 16 (64 folds of 33 key tiles); on two consumers, a few queries over
    # long keys (32 row blocks, each in parts) and 32 heads of 10 row blocks of 128 (320 work tiles, the last 56 in
    # parts)
    assert_split_changes_only_rounding(64, lens_q, lens_k, heads, kv_heads, causal, settings)


def assert_split_changes_only_rounding(d, lens_q, lens_k, heads, kv_heads, causal, settings):
    """BF16 attention at head dim d with these launcher settings, split and not: the outputs differ (the split ran)
    by rounding only."""
    gen = torch.Generator(device="cuda").manual_seed(d)
    q, cu_q = _packed(lens_q, heads, d, gen)
    k, cu_k = _packed(lens_k, kv_heads, d, gen)
    v, _ = _packed(lens_k, kv_heads, d, gen)
    args = (q, k, v, cu_q, cu_k, max(lens_q), d**-0.5, causal)
    split, split_lse = attention_sm90.attention_fwd_sm90(*args, max_seqlen_k=max(lens_k), **settings)
    whole, whole_lse = attention_sm90.attention_fwd_sm90(*args, max_seqlen_k=max(lens_k), split=False, **settings)
    assert not torch.equal(split, whole)
    assert (split.double() - whole.double()).abs().max().item() <= 2**-7
    assert (split_lse - whole_lse).abs().max().item() <= 1e-4
