"""Where a work tile's time goes inside the CUDA attention kernel: the SM's clock at a few points of every work item,
per CTA and warpgroup, recorded by a library built with the instrument's switch (kernels/fa3fp8/csrc/timeline.cuh).

    FA3FP8_NVCC_FLAGS=-DFA3FP8_TIMELINE=1 python benchmarks/timeline.py [--cases fp8:128:4096,fp8:128:16384]
                                                                       [--causal] [--out DIR]

A case is dtype:d:S at the bench's shape (call_anatomy.py's cases). One call is recorded after a warmup. Per case and
warpgroup kind (the producer's one thread; the consumer warpgroups with rows), medians over the work items, in
cycles: `q_wait` (the item's top to Q landed; the producer: to Q's copy issued), `first_qk` (to the first Q·Kᵀ in
registers; the producer: its first K/V copies issued), `loop` (to the last P·V; the producer: every copy issued),
`epilogue` (to the item's end) and `gap` (to the next item's top); `per_tile`, a key tile's cycles in the loop (the
slope over items of different lengths, else loop / key tiles) and `fixed_tiles`, a work tile's whole period less its
key tiles' loop time, in key-tile times. Per launch: the SM clock, the spread of the CTAs' starts and ends, and
`tail_idle`, the share of the CTAs' time spent idle once each has ended before the last (the last round's imbalance).
`--out DIR` writes timeline-<gpu>-<date>.json.
"""

import argparse
import ctypes
import datetime
import json
import os
import re
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "kernels"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import attention as bench  # noqa: E402
import call_anatomy  # noqa: E402
from fa3fp8 import cuda_build  # noqa: E402

HEADER_FILE = ROOT / "kernels" / "fa3fp8" / "csrc" / "timeline.cuh"
EVENTS = ("top", "q", "first", "loop", "end", "info")
WARMUP = 5


def layout(text=None):
    """{ROLES, HEADER, ITEMS, EVENTS, WORDS} of the records, read from timeline.cuh (or `text`)."""
    text = HEADER_FILE.read_text() if text is None else text
    sizes = {name: int(value) for name, value in re.findall(r"constexpr int TIMELINE_(\w+) = (\d+);", text)}
    missing = {"ROLES", "HEADER", "ITEMS", "EVENTS"} - sizes.keys()
    if missing:
        raise ValueError(f"timeline.cuh: no TIMELINE_{', TIMELINE_'.join(sorted(missing))}")
    sizes["WORDS"] = sizes["HEADER"] + sizes["ITEMS"] * sizes["EVENTS"]
    return sizes


def work_items(records, sizes):
    """The recorded work items of `records` (CTAs x ROLES x WORDS integers, as the kernel writes them): a dict per
    item with its cta, role, index, the clock at each event (0 where not recorded), w, key tiles and segment flag."""
    items = []
    for cta, roles in enumerate(records):
        for role, words in enumerate(roles):
            for index in range(sizes["ITEMS"]):
                base = sizes["HEADER"] + index * sizes["EVENTS"]
                clocks = [int(x) for x in words[base:base + sizes["EVENTS"]]]
                if clocks[0] == 0:
                    continue
                info = clocks[5] & (2**64 - 1)
                low = info & 0xFFFFFFFF
                items.append({"cta": cta, "role": role, "index": index, **dict(zip(EVENTS[:5], clocks[:5])),
                              "w": info >> 32, "tiles": low & 0x7FFFFFFF, "segment": bool(low >> 31)})
    return items


def _median(values):
    return statistics.median(values) if values else None


def phases(items):
    """Medians of the phases of `items` (one warpgroup kind's, work_items' form) and the per-tile and fixed costs.
    Items without key tiles (idle warpgroups, keyless segments) are left out."""
    by_place = {}
    for item in items:
        by_place.setdefault((item["cta"], item["role"]), []).append(item)
    durations = {name: [] for name in ("q_wait", "first_qk", "loop", "epilogue", "gap", "period")}
    fit = []  # (key tiles, loop cycles) for the slope
    for row in by_place.values():
        row.sort(key=lambda item: item["index"])
        for item, after in zip(row, row[1:] + [None]):
            if item["tiles"] == 0:
                continue
            durations["q_wait"].append(item["q"] - item["top"])
            durations["first_qk"].append(item["first"] - item["q"])
            durations["loop"].append(item["loop"] - item["first"])
            if item["end"]:
                durations["epilogue"].append(item["end"] - item["loop"])
            if after is not None:
                durations["gap"].append(after["top"] - (item["end"] or item["loop"]))
                durations["period"].append(after["top"] - item["top"])
            fit.append((item["tiles"], item["loop"] - item["first"]))
    result = {name: _median(values) for name, values in durations.items()}
    result["items"] = len(fit)
    counts = {tiles for tiles, _ in fit}
    if len(counts) >= 2:
        mean_x = statistics.fmean(x for x, _ in fit)
        mean_y = statistics.fmean(y for _, y in fit)
        slope = (sum((x - mean_x) * (y - mean_y) for x, y in fit) / sum((x - mean_x) ** 2 for x, _ in fit))
    else:
        slope = _median([y / x for x, y in fit]) if fit else None
    result["per_tile"] = slope
    full = max(counts) if counts else None
    periods = [after["top"] - item["top"] for row in by_place.values() for item, after in zip(row, row[1:])
               if item["tiles"] == full]
    result["fixed_tiles"] = (_median(periods) - full * slope) / slope if periods and slope else None
    return result


def launch_edges(records, items):
    """The launch's edges from the producers' headers of `records` (`items`: their work_items): CTAs that ran, the
    SM clock (MHz, median), the spread of their starts and ends (us), tail_idle, the share of the CTAs' time between
    each one's end and the last one's, and per_cta: each CTA's SM, start and end (us from the first start), work
    items, key tiles and its first consumer's loop time per key tile (us), so that a slow CTA shows as a slow SM or
    as more work."""
    by_cta = {}
    for item in items:
        by_cta.setdefault(item["cta"], []).append(item)
    runs = []
    for cta, roles in enumerate(records):
        start_ns, start_clk, end_ns, end_clk, sm = (int(x) for x in roles[0][:5])
        if start_ns and end_ns > start_ns:
            runs.append((start_ns, start_clk, end_ns, end_clk, sm, cta))
    if not runs:
        raise ValueError("timeline: no CTA recorded its start and end (was the library built with the switch?)")
    first, last = min(r[0] for r in runs), max(r[2] for r in runs)
    span = last - first
    mhz = statistics.median((r[3] - r[1]) / (r[2] - r[0]) * 1e3 for r in runs)
    per_cta = []
    for start_ns, _, end_ns, _, sm, cta in runs:
        loads = [i for i in by_cta.get(cta, []) if i["role"] == 0]
        loops = [i for i in by_cta.get(cta, []) if i["role"] == 1 and i["tiles"]]
        tiles = sum(i["tiles"] for i in loops)
        loop_cycles = sum(i["loop"] - i["first"] for i in loops)
        per_cta.append({"cta": cta, "sm": sm, "start_us": (start_ns - first) / 1e3, "end_us": (end_ns - first) / 1e3,
                        "items": len(loads), "key_tiles": sum(i["tiles"] for i in loads),
                        "loop_us_per_tile": loop_cycles / tiles / mhz if tiles else None})
    return {"ctas": len(runs), "sm_mhz": mhz, "span_us": span / 1e3,
            "start_spread_us": (max(r[0] for r in runs) - first) / 1e3,
            "end_spread_us": (last - min(r[2] for r in runs)) / 1e3,
            "tail_idle": sum(last - r[2] for r in runs) / (len(runs) * span) if span else 0.0,
            "per_cta": per_cta}


def summarize(records, sizes):
    """phases() of the producer and of the consumers, and launch_edges(), of one launch's records."""
    items = work_items(records, sizes)
    return {"producer": phases([i for i in items if i["role"] == 0]),
            "consumers": phases([i for i in items if i["role"] > 0]),
            "launch": launch_edges(records, items)}


def recorder():
    """The library's fa3fp8_timeline(records, ctas), or SystemExit where it was built without the switch."""
    lib = cuda_build.load()
    try:
        fn = lib.fa3fp8_timeline
    except AttributeError:
        raise SystemExit("timeline: the kernel library has no records; build it with "
                         "FA3FP8_NVCC_FLAGS=-DFA3FP8_TIMELINE=1") from None
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_int], None
    return fn


def record(fn, ctas, sizes, set_records):
    """One call of fn recorded into a buffer for `ctas` CTAs: its records on the CPU (CTAs x ROLES x WORDS)."""
    for _ in range(WARMUP):
        fn()
    buffer = torch.zeros(ctas, sizes["ROLES"], sizes["WORDS"], dtype=torch.int64, device="cuda")
    torch.cuda.synchronize()
    set_records(buffer.data_ptr(), ctas)
    try:
        fn()
        torch.cuda.synchronize()
    finally:
        set_records(None, 0)
    return buffer.cpu().tolist()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=call_anatomy.parse_cases,
                        default=call_anatomy.parse_cases(call_anatomy.DEFAULT_CASES),
                        help=f"dtype:d:S, comma-separated (default {call_anatomy.DEFAULT_CASES})")
    parser.add_argument("--causal", action="store_true", help="causal attention (default: without a mask)")
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args()
    sizes, set_records = layout(), recorder()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for dtype, d, seqlen in args.cases:
        batch, heads = bench.shape_for(seqlen, d)
        ctas = batch * heads * -(-seqlen // 64) + 4 * sms  # a causal launch's work tiles and split parts, at most
        fn = call_anatomy.runners(dtype, d, seqlen, args.causal, peers=False)["fa3fp8"]
        row = {"dtype": dtype, "d": d, "S": seqlen, "causal": args.causal,
               **summarize(record(fn, ctas, sizes, set_records), sizes)}
        rows.append(row)
        mhz = row["launch"]["sm_mhz"]
        for kind in ("producer", "consumers"):
            ph = row[kind]
            cells = "  ".join(f"{name} {ph[name] / mhz:7.2f}" if ph[name] is not None else f"{name}       -"
                              for name in ("q_wait", "first_qk", "loop", "epilogue", "gap", "period", "per_tile"))
            fixed = f"{ph['fixed_tiles']:5.2f}" if ph["fixed_tiles"] is not None else "    -"
            print(f"{dtype:4s} d{d:<3d} S{seqlen:<6d} {kind:9s} {ph['items']:5d} items  us: {cells}  "
                  f"fixed {fixed} key tiles")
        edges = row["launch"]
        print(f"{'':17s} launch: {edges['ctas']} CTAs at {mhz:.0f} MHz, {edges['span_us']:.1f} us, starts spread "
              f"{edges['start_spread_us']:.1f} us, ends {edges['end_spread_us']:.1f} us, tail idle "
              f"{100 * edges['tail_idle']:.1f}%")
        latest = sorted(edges["per_cta"], key=lambda c: c["end_us"])
        for label, group in (("first to end", latest[:3]), ("last to end", latest[-3:])):
            print(f"{'':17s} {label}: " + "; ".join(
                f"SM {c['sm']} at {c['end_us']:.1f} us, {c['items']} items, {c['key_tiles']} key tiles"
                for c in group))
    if args.out:
        gpu = torch.cuda.get_device_name()
        path = Path(args.out) / f"timeline-{gpu.replace(' ', '-').lower()}-{datetime.date.today().isoformat()}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
