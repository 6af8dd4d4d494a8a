"""Machine code of two builds of the kernel library, function by function (cuobjdump's SASS).

    python benchmarks/sass_diff.py OLD.so NEW.so [--match attn_fwd] [--opcodes]

For a build switch, or a change meant to touch some kernels only, without a GPU: which functions' SASS is identical,
which changed (instructions before and after, and the key-tile loop's: the shortest backward branch over wgmma and
an exponential), which use local memory (STL / LDL: spills or stack arrays), and which exist in one build only. With
--opcodes, the opcode counts that differ inside each changed function's key-tile loop. The cuobjdump is CUDA's, or
Triton's own.
"""

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stall_samples import opcodes, wgmma_loops  # noqa: E402

INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
LOCAL_MEMORY = ("STL", "LDL")


def cuobjdump() -> str:
    """Path of a cuobjdump: on PATH, else the one in Triton's NVIDIA backend. FileNotFoundError when neither is."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import triton
    except ImportError:
        triton = None
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump" if triton else None
    if bundled is None or not bundled.exists():
        raise FileNotFoundError("cuobjdump: not on PATH and no Triton NVIDIA backend that ships one")
    return str(bundled)


def read_sass(text: str) -> dict:
    """{mangled function name: [(address, instruction)]} of `cuobjdump -sass` output (predicates kept, ';' and the
    encodings dropped)."""
    functions = {}
    for part in re.split(r"\n\s*Function : ", text)[1:]:
        name, _, body = part.partition("\n")
        functions[name.strip()] = [(int(address, 16), source.strip()) for address, source in INSTRUCTION.findall(body)]
    return functions


def library_sass(path: Path) -> dict:
    """read_sass of every cubin in a shared library or cubin file. ValueError naming the file when it holds none."""
    tool = cuobjdump()
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([tool, "-xelf", "all", str(Path(path).resolve())], cwd=folder, capture_output=True, check=False)
        cubins = sorted(Path(folder).glob("*.cubin")) or [Path(path)]
        functions = {}
        for cubin in cubins:
            dump = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=False)
            functions.update(read_sass(dump.stdout))
    if not functions:
        raise ValueError(f"{path}: no SASS found (not a CUDA library or cubin)")
    return functions


def opcode(source: str) -> str:
    """The opcode of an instruction without its predicate and modifiers (HGMMA, MUFU, BRA)."""
    return opcodes([(0, source)])[0].split(".")[0]


def key_tile_loop(code: list) -> tuple | None:
    """(first, last) indices of the shortest backward branch's range that holds a wgmma (HGMMA / QGMMA) and an
    exponential (MUFU.EX2): without execution counts, the innermost loop over the tensor cores and the softmax (a
    work tile's last P·V and epilogue can form a shorter loop over wgmma, with reciprocals). None when there is
    none."""
    loops = [loop for loop in wgmma_loops(code)
             if any(op.startswith("MUFU.EX2") for op in opcodes(code[loop[0]:loop[1] + 1]))]
    return min(loops, key=lambda loop: loop[1] - loop[0], default=None)


def loop_opcodes(code: list) -> Counter:
    """Opcode counts inside the key-tile loop (empty without one)."""
    loop = key_tile_loop(code)
    return Counter(opcode(source) for _, source in code[loop[0]:loop[1] + 1]) if loop else Counter()


def local_memory(code: list) -> int:
    """Local-memory instructions (STL, LDL) in a function."""
    return sum(opcode(source) in LOCAL_MEMORY for _, source in code)


def demangle(names: list) -> dict:
    """{mangled: readable} through c++filt where there is one, else the names as they are."""
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {name: name for name in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=False).stdout
    readable = out.splitlines()
    return dict(zip(names, readable, strict=True)) if len(readable) == len(names) else {name: name for name in names}


def compare(old: dict, new: dict, match: str | None = None) -> dict:
    """The functions (names matching the regex `match`, if given) sorted into identical, changed, only_old and
    only_new; instructions compare without their addresses."""
    pattern = re.compile(match) if match else None
    names = [name for name in {**old, **new} if pattern is None or pattern.search(name)]

    def same(name):
        return [source for _, source in old[name]] == [source for _, source in new[name]]

    return {
        "identical": sorted(name for name in names if name in old and name in new and same(name)),
        "changed": sorted(name for name in names if name in old and name in new and not same(name)),
        "only_old": sorted(name for name in names if name not in new),
        "only_new": sorted(name for name in names if name not in old),
    }


def report(old: dict, new: dict, match: str | None = None, opcodes: bool = False, width: int = 150) -> str:
    """The comparison as text: counts, then each changed function with its instructions, key-tile loop and local
    memory before -> after, then the functions of one build only."""
    sorted_names = compare(old, new, match)
    readable = demangle([name for group in sorted_names.values() for name in group])
    lines = [f"{len(sorted_names['identical'])} identical, {len(sorted_names['changed'])} changed, "
             f"{len(sorted_names['only_old'])} only in the first, {len(sorted_names['only_new'])} only in the second"]

    def loop_length(code):
        loop = key_tile_loop(code)
        return loop[1] - loop[0] + 1 if loop else 0

    for name in sorted_names["changed"]:
        a, b = old[name], new[name]
        loops, spills = (loop_length(a), loop_length(b)), (local_memory(a), local_memory(b))
        spill = f", local memory {spills[0]} -> {spills[1]}" if any(spills) else ""
        lines.append(f"  changed: {len(a)} -> {len(b)} instructions, loop {loops[0]} -> {loops[1]}"
                     f"{spill}: {readable[name]}"[:width])
        if opcodes and any(loops):
            before, after = loop_opcodes(a), loop_opcodes(b)
            moved = {op: after[op] - before[op] for op in sorted(before | after) if after[op] != before[op]}
            lines.append("    loop opcodes: " + (", ".join(f"{op} {n:+d}" for op, n in moved.items()) or "same"))
    for group, title in (("only_old", "only in the first"), ("only_new", "only in the second")):
        for name in sorted_names[group]:
            code = (old if group == "only_old" else new)[name]
            lines.append(f"  {title}: {len(code)} instructions, loop {loop_length(code)}: {readable[name]}"[:width])
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", type=Path, help="the first build (.so or .cubin)")
    parser.add_argument("new", type=Path, help="the second build")
    parser.add_argument("--match", help="only functions whose mangled names match this regex (e.g. attn_fwd)")
    parser.add_argument("--opcodes", action="store_true", help="the loop's opcode counts that differ")
    args = parser.parse_args()
    try:
        old, new = library_sass(args.old), library_sass(args.new)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    print(report(old, new, args.match, args.opcodes))


if __name__ == "__main__":
    main()
