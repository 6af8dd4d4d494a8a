"""Warp-stall samples of one kernel's machine code around its key-tile loop, from Nsight Compute's source page.

    ncu --set full -f -o /tmp/report ... python benchmarks/profile_kernel.py fp8 128 16384 --causal
    ncu -i /tmp/report.ncu-rep --page source --csv --print-source sass > causal.csv
    python benchmarks/stall_samples.py causal.csv [full.csv]

(`benchmarks/gpu_check.sh profile` does the first two.) The key-tile loop is the backward branch over wgmma
instructions (HGMMA, QGMMA) that runs most often. Per 1000 of its iterations (its branch's executions, counted per
warp) the report gives the samples of each stall reason, for two profiles side by side, so that kernels whose loops
run different iteration counts compare per tile; then the loop's code by execution count (the paths every tile runs,
and those only some run, such as a masked tile's) and the code outside the loop by execution count (per work tile,
per K/V tile of the producer, once per CTA). A sample is a warp's state at one sampling point, so samples add up to
warp time, idle warps' included.
"""

import argparse
import csv
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

ALL_SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
PER = 1000  # iterations per reported figure
BRANCH = re.compile(r"\bBRA\b[^;]*?0x([0-9a-fA-F]+)")
PREDICATE = re.compile(r"^@!?U?P\w+\s+")


@dataclass
class Instruction:
    address: int
    source: str
    executed: float  # executions, per warp
    samples: float  # every warp-stall sample at this instruction
    stalls: dict  # stall reason -> samples (issued or not)

    @property
    def opcode(self) -> str:
        return opcodes([(self.address, self.source)])[0]


def read_source_page(path: Path) -> list:
    """The instructions of `ncu --page source --csv --print-source sass` output, in address order. ValueError naming
    the file when it has no such page (no header row with Address and Source columns)."""
    rows = list(csv.reader(Path(path).read_text().splitlines()))
    header = next((i for i, row in enumerate(rows) if "Address" in row and "Source" in row), None)
    if header is None:
        raise ValueError(f"{path}: not an ncu source page (no header row with Address and Source columns)")
    names = rows[header]
    column = {name: i for i, name in enumerate(names)}
    reasons = [(name.removeprefix("stall_"), i) for i, name in enumerate(names)
               if name.startswith("stall_") and "Not Issued" not in name]

    def number(row, name):
        i = column.get(name)
        return float(row[i].replace(",", "")) if i is not None and i < len(row) and row[i].strip() else 0.0

    instructions = []
    for row in rows[header + 1:]:
        try:
            address = int(row[column["Address"]], 16)
        except (ValueError, IndexError):
            continue
        stalls = {reason: float(row[i].replace(",", "") or 0) for reason, i in reasons if i < len(row)}
        instructions.append(Instruction(address, row[column["Source"]].strip(), number(row, EXECUTED),
                                        number(row, ALL_SAMPLES), stalls))
    return sorted(instructions, key=lambda ins: ins.address)


def wgmma_loops(code: list) -> list:
    """(first, last) indices of the backward branches' ranges that hold a wgmma (HGMMA / QGMMA), in `code`:
    [(address, instruction)] in address order."""
    index = {address: i for i, (address, _) in enumerate(code)}
    loops = []
    for last, (_, source) in enumerate(code):
        match = BRANCH.search(source)
        first = index.get(int(match.group(1), 16)) if match else None
        if first is not None and first < last and any("GMMA" in opcode for opcode in opcodes(code[first:last + 1])):
            loops.append((first, last))
    return loops


def opcodes(code: list) -> list:
    """The opcodes (with their modifiers, without predicates) of [(address, instruction)]."""
    return [PREDICATE.sub("", source).split(" ")[0] for _, source in code]


def key_tile_loop(instructions: list) -> tuple:
    """(first, last) indices of the key-tile loop: of the backward branches whose range holds a wgmma, the one
    executed most often. ValueError when there is none."""
    loops = wgmma_loops([(ins.address, ins.source) for ins in instructions])
    if not loops:
        raise ValueError("no loop over wgmma instructions (HGMMA / QGMMA) in this code")
    return max(loops, key=lambda loop: instructions[loop[1]].executed)


def per_iteration(instructions: list, loop: tuple) -> dict:
    """{stall reason: samples per PER iterations of the loop}, and "total"."""
    first, last = loop
    iterations = instructions[last].executed
    reasons = Counter()
    for ins in instructions[first:last + 1]:
        reasons.update(ins.stalls)
    figures = {reason: samples * PER / iterations for reason, samples in reasons.items()}
    figures["total"] = sum(ins.samples for ins in instructions[first:last + 1]) * PER / iterations
    return figures


def by_execution_count(instructions: list) -> list:
    """[(executions, instructions, samples, most common opcodes)] of these instructions grouped by how often each
    ran, most samples first."""
    groups = defaultdict(lambda: [0, 0.0, Counter()])
    for ins in instructions:
        group = groups[ins.executed]
        group[0] += 1
        group[1] += ins.samples
        group[2][ins.opcode] += 1
    return sorted(((executed, n, samples, ops.most_common(4)) for executed, (n, samples, ops) in groups.items()),
                  key=lambda group: -group[2])


def describe(path: Path, instructions: list, loop: tuple, groups: int = 6) -> list:
    """Report lines of one profile: its loop's share of the samples, then both sides of the loop by execution
    count."""
    first, last = loop
    total = sum(ins.samples for ins in instructions) or 1.0
    inside = instructions[first:last + 1]
    outside = instructions[:first] + instructions[last + 1:]
    lines = [f"{path}: {len(instructions)} instructions, {total:.0f} samples; key-tile loop "
             f"{inside[0].address:#x}-{inside[-1].address:#x} ({len(inside)} instructions, branch executed "
             f"{inside[-1].executed:.0f} times) holds {sum(i.samples for i in inside) / total:.1%} of them"]
    for title, part in (("in the loop", inside), ("outside the loop", outside)):
        lines.append(f"  {title}, by execution count:")
        for executed, n, samples, ops in by_execution_count(part)[:groups]:
            names = ", ".join(f"{op} {count}" for op, count in ops)
            lines.append(f"    {executed:>10.0f} x {n:4d} instructions: {samples / total:6.1%} of samples ({names})")
    return lines


def report(paths: list, reasons: int = 10) -> str:
    """The report of one profile, or of two with their loops' stall reasons side by side."""
    profiles = []
    lines = []
    for path in paths:
        instructions = read_source_page(path)
        loop = key_tile_loop(instructions)
        profiles.append(per_iteration(instructions, loop))
        lines += describe(path, instructions, loop)
    lines.append(f"samples per {PER} iterations of the key-tile loop" + (" (first / second profile)" if
                                                                          len(paths) > 1 else ""))
    order = sorted(profiles[0], key=lambda reason: -max(p.get(reason, 0.0) for p in profiles))
    for reason in order[:reasons + 1]:
        values = " ".join(f"{p.get(reason, 0.0):8.1f}" for p in profiles)
        change = (f" {profiles[1].get(reason, 0.0) - profiles[0].get(reason, 0.0):+7.1f}" if len(profiles) > 1
                  else "")
        lines.append(f"  {reason:20s} {values}{change}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", type=Path, nargs="+", help="one or two source pages (ncu --page source --csv)")
    parser.add_argument("--reasons", type=int, default=10, help="stall reasons listed")
    args = parser.parse_args()
    if len(args.csv) > 2:
        parser.error("csv: one or two files")
    print(report(args.csv, args.reasons))


if __name__ == "__main__":
    main()
