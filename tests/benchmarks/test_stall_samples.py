"""benchmarks/stall_samples.py on a small source page written here: the key-tile loop it finds, its samples per
iteration, the groups by execution count, and the errors for a file that is not a source page."""

import pytest

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_barrier",'
          '"stall_mio","stall_wait","stall_wait (Not Issued)"')
# an outer loop (0x100-0x160) around the key-tile loop (0x110-0x130), each over an HGMMA; the inner one runs most
ROWS = [
    ("0x100", "MOV R1, R2", 2, 10, 0, 0, 2),
    ("0x110", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ", 50, 1000, 30, 0, 20),
    ("0x120", "MUFU.EX2 R3, R3", 40, 1000, 0, 25, 15),
    ("0x130", "@!P0 BRA 0x110", 10, 1000, 0, 0, 10),
    ("0x140", "@P1 BRA 0x120", 0, 0, 0, 0, 0),  # forward
    ("0x150", "FMUL R4, R4, R5", 5, 10, 0, 0, 5),
    ("0x160", "@!P1 BRA 0x100", 1, 10, 0, 0, 1),
    ("0x170", "EXIT", 0, 1, 0, 0, 0),
]


def page(tmp_path, rows=ROWS, name="page.csv"):
    lines = ['"Kernel Name","attn_fwd"', HEADER]
    lines += [",".join(f'"{value}"' for value in (*row, row[-1] * 100)) for row in rows]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_finds_the_loop_executed_most_often_and_counts_its_samples_per_iteration(stalls, tmp_path):
    instructions = stalls.read_source_page(page(tmp_path))
    assert [ins.opcode for ins in instructions][:3] == ["MOV", "HGMMA.64x128x16.F32.BF16", "MUFU.EX2"]
    loop = stalls.key_tile_loop(instructions)
    assert [instructions[i].address for i in loop] == [0x110, 0x130]
    figures = stalls.per_iteration(instructions, loop)
    # 1000 iterations: samples per 1000 iterations are the samples; "Not Issued" columns are not reasons of their own
    assert figures == {"total": 100.0, "barrier": 30.0, "mio": 25.0, "wait": 45.0}


def test_groups_code_by_execution_count_most_samples_first(stalls, tmp_path):
    instructions = stalls.read_source_page(page(tmp_path))
    groups = stalls.by_execution_count(instructions)
    assert [(executed, n, samples) for executed, n, samples, _ in groups] == [
        (1000, 3, 100.0), (10, 3, 8.0), (0, 1, 0.0), (1, 1, 0.0)]
    assert dict(groups[1][3]) == {"MOV": 1, "FMUL": 1, "BRA": 1}


def test_reports_two_profiles_side_by_side(stalls, tmp_path):
    # the second profile's exponentials wait 25 samples more per 1000 iterations for the MUFU queue
    slower = [("0x120", "MUFU.EX2 R3, R3", 65, 1000, 0, 50, 15) if row[0] == "0x120" else row for row in ROWS]
    text = stalls.report([page(tmp_path), page(tmp_path, slower, "slower.csv")])
    assert "key-tile loop 0x110-0x130 (3 instructions, branch executed 1000 times)" in text
    lines = {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.startswith("  ") and
             not line.startswith("    ")}
    assert lines["total"] == ["100.0", "125.0", "+25.0"]
    assert lines["mio"] == ["25.0", "50.0", "+25.0"]
    assert lines["barrier"] == ["30.0", "30.0", "+0.0"]


def test_refuses_a_file_that_is_not_a_source_page_naming_it(stalls, tmp_path):
    path = tmp_path / "details.txt"
    path.write_text("Section: GPU Speed Of Light Throughput\n    Duration  ms  1.43\n")
    with pytest.raises(ValueError, match="details.txt: not an ncu source page"):
        stalls.read_source_page(path)


def test_refuses_code_without_a_wgmma_loop(stalls, tmp_path):
    rows = [row for row in ROWS if "GMMA" not in row[1]]
    with pytest.raises(ValueError, match="no loop over wgmma"):
        stalls.key_tile_loop(stalls.read_source_page(page(tmp_path, rows)))
