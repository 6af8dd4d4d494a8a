"""benchmarks/sass_diff.py on SASS written here in cuobjdump's layout (the key-tile loop it finds, the functions it
sorts, the report), and with nvcc on two builds of a small kernel."""

import subprocess

import pytest
from fa3fp8 import cuda_build

# an outer loop (0x00-0x60) around the key-tile loop (0x10-0x30), each over an HGMMA, and a forward branch
LOOPED = [
    "MOV R1, R2",
    "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ",
    "MUFU.EX2 R3, R3",
    "@!P0 BRA 0x10",
    "@P1 BRA 0x50",
    "FMUL R4, R4, R5",
    "@!P1 BRA 0x0",
    "EXIT",
]


def function(name, instructions):
    """One function of `cuobjdump -sass` output: its header, then each instruction at 16-byte steps with its
    encoding words, as cuobjdump prints them."""
    lines = [f"\t\tFunction : {name}", '\t.headerflags\t@"EF_CUDA_SM90"']
    for i, source in enumerate(instructions):
        lines.append(f"        /*{16 * i:04x}*/                   {source} ;   /* 0x000fe40000000800 */")
        lines.append("                                                       /* 0x000fe40000000800 */")
    return "\n".join(lines)


def dump(functions):
    return "\n\tcode for sm_90a\n" + "\n".join(function(name, code) for name, code in functions.items()) + "\n"


def test_reads_each_functions_instructions_and_finds_the_innermost_loop_over_wgmma(sass):
    functions = sass.read_sass(dump({"_Z4loopv": LOOPED, "_Z4flatv": ["MOV R1, R2", "EXIT"]}))
    assert list(functions) == ["_Z4loopv", "_Z4flatv"]
    assert functions["_Z4loopv"][3] == (0x30, "@!P0 BRA 0x10")
    assert sass.key_tile_loop(functions["_Z4loopv"]) == (1, 3)  # 0x10 .. 0x30: the HGMMA, the MUFU, the branch
    assert sass.loop_opcodes(functions["_Z4loopv"]) == {"HGMMA": 1, "MUFU": 1, "BRA": 1}
    assert sass.key_tile_loop(functions["_Z4flatv"]) is None
    # a loop without a wgmma, or without an exponential (a last P·V and its epilogue's reciprocals), is none
    plain = sass.read_sass(dump({"f": ["MOV R1, R2", "FADD R1, R1, R1", "@P0 BRA 0x0"]}))["f"]
    assert sass.key_tile_loop(plain) is None
    epilogue = ["HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24", "@P0 BRA 0x80"]  # at 0x80, after LOOPED
    assert sass.key_tile_loop(sass.read_sass(dump({"f": LOOPED + epilogue}))["f"]) == (1, 3)


def test_sorts_functions_into_identical_changed_and_one_build_only(sass):
    shifted = ["NOP"] + LOOPED[:3] + ["@!P0 BRA 0x20"] + LOOPED[4:]
    old = sass.read_sass(dump({"same": LOOPED, "moved": LOOPED, "gone": LOOPED}))
    new = sass.read_sass(dump({"same": LOOPED, "moved": shifted, "added": LOOPED}))
    assert sass.compare(old, new) == {"identical": ["same"], "changed": ["moved"], "only_old": ["gone"],
                                      "only_new": ["added"]}
    assert sass.compare(old, new, match="^mo") == {"identical": [], "changed": ["moved"], "only_old": [],
                                                   "only_new": []}


def test_report_gives_sizes_loops_local_memory_and_the_loops_opcodes_that_moved(sass):
    spilled = LOOPED[:2] + ["STL [R1], R3", "MUFU.EX2 R3, R3", "MUFU.EX2 R4, R4", "@!P0 BRA 0x10"] + LOOPED[4:]
    old = sass.read_sass(dump({"k": LOOPED, "gone": ["EXIT"]}))
    new = sass.read_sass(dump({"k": spilled}))
    text = sass.report(old, new, opcodes=True)
    assert text.splitlines()[0] == "0 identical, 1 changed, 1 only in the first, 0 only in the second"
    assert "changed: 8 -> 10 instructions, loop 3 -> 5, local memory 0 -> 1: k" in text
    assert "loop opcodes: MUFU +1, STL +1" in text
    assert "only in the first: 1 instructions, loop 0: gone" in text


def test_a_file_without_sass_is_named(sass, tmp_path):
    try:
        sass.cuobjdump()
    except FileNotFoundError:
        pytest.skip("needs cuobjdump")
    path = tmp_path / "notes.txt"
    path.write_text("no machine code here\n")
    with pytest.raises(ValueError, match="notes.txt: no SASS found"):
        sass.library_sass(path)


def build(tmp_path, name, body):
    """A cubin of one small kernel, built by nvcc for sm_90a."""
    source = tmp_path / f"{name}.cu"
    source.write_text(f'extern "C" __global__ void scale(float* x, float a) {{ {body} }}\n')
    subprocess.run([cuda_build.nvcc(), "-cubin", "-arch=sm_90a", "-o", str(tmp_path / f"{name}.cubin"), str(source)],
                   check=True, capture_output=True)
    return tmp_path / f"{name}.cubin"


@pytest.mark.skipif(cuda_build.nvcc() is None, reason="needs nvcc")
def test_two_builds_of_a_kernel_compare_through_cuobjdump(sass, tmp_path):
    first = build(tmp_path, "first", "x[threadIdx.x] *= a;")
    again = build(tmp_path, "again", "x[threadIdx.x] *= a;")
    other = build(tmp_path, "other", "x[threadIdx.x] = x[threadIdx.x] * a + 1.f;")
    assert sass.compare(sass.library_sass(first), sass.library_sass(again)) == {
        "identical": ["scale"], "changed": [], "only_old": [], "only_new": []}
    assert sass.compare(sass.library_sass(first), sass.library_sass(other))["changed"] == ["scale"]
