"""Build and load fa3fp8's CUDA C++ kernels (`csrc/`) with nvcc: one shared library per hash of the sources.

The library exposes plain C functions (no torch headers), so it builds the same way on a GPU machine, in a
Docker build stage or on a CPU-only CI machine that has nvcc (where the tests compile it for sm_90a and read
ptxas's report). `python -m fa3fp8.cuda_build DIR` builds it into DIR ahead of time; at run time the library is
looked up beside the sources, then in `FA3FP8_CACHE_DIR`, and built there when missing.
"""

import ctypes
import functools
import hashlib
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from . import env

CSRC = Path(__file__).parent / "csrc"
ARCH_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)  # wgmma and setmaxnreg exist only on sm_90a
FLAGS = ("-O3", "-std=c++17", "-Xcompiler", "-fPIC", "-lineinfo", *ARCH_FLAGS)
# The library's compilation units (in CSRC) and the options each adds to FLAGS: ptxas's options apply to a whole unit,
# so kernels whose schedule is better with others than the rest's are compiled in a unit of their own.
UNITS = {
    "attn_sm90.cu": (),
    "attn_sm90_d256_folds.cu": ("-Xptxas", "--register-usage-level=8"),
    "attn_sm90_d64.cu": (),
}


def toolchain_nvcc() -> str | None:
    """Path of nvcc from the pinned CUDA compiler wheels (pyproject's `cuda-build` extra) in this Python environment;
    None when they are not installed."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except ValueError:  # an `nvidia` module without a spec
        return None
    for root in spec.submodule_search_locations if spec else ():
        candidate = Path(root) / "cu13" / "bin" / "nvcc"
        if candidate.is_file():
            return str(candidate)
    return None


def nvcc() -> str | None:
    """Path of nvcc: FA3FP8_NVCC's (env.nvcc), else the pinned toolchain's (toolchain_nvcc), else the one on PATH, else
    under CUDA_HOME; None when there is none."""
    found = env.nvcc() or toolchain_nvcc() or shutil.which("nvcc")
    if found:
        return found
    candidate = Path(env.cuda_home()) / "bin" / "nvcc"
    return str(candidate) if candidate.is_file() else None


def build_flags() -> tuple[str, ...]:
    """The nvcc options of every unit: FLAGS, then FA3FP8_NVCC_FLAGS' (env.nvcc_flags; an experiment's switch)."""
    return (*FLAGS, *env.nvcc_flags())


def library_name(folder: Path | None = None, units: dict[str, tuple[str, ...]] | None = None) -> str:
    """File name of the built library: its first unit's stem and a hash of every source in `folder` (*.cu, *.cuh),
    build_flags() and the units' own options (None: CSRC, UNITS). The compiler is not in it, so that a library built
    ahead of time is found on a machine without nvcc or with another one: after changing compilers, empty the cache
    directory (the pinned toolchain's version changes only with pyproject's `cuda-build` extra)."""
    folder, units = folder or CSRC, units or UNITS
    digest = hashlib.sha256(" ".join(build_flags()).encode())
    for source in sorted([*folder.glob("*.cu"), *folder.glob("*.cuh")]):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    for unit, flags in units.items():
        digest.update(" ".join((unit, *flags)).encode())
    return f"lib{Path(next(iter(units))).stem}-{digest.hexdigest()[:16]}.so"


def compile_library(output: Path, folder: Path | None = None, units: dict[str, tuple[str, ...]] | None = None) -> str:
    """Compile the units (None: CSRC, UNITS) at once, each with build_flags() and its own options, and link them into
    the shared library `output` (written atomically); returns ptxas's reports (`-Xptxas -v`), unit by unit."""
    compiler = nvcc()
    if compiler is None:
        raise RuntimeError("nvcc not found: put it on PATH or set CUDA_HOME")
    folder, units = folder or CSRC, units or UNITS
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent) as scratch:
        objects = [Path(scratch) / f"{Path(unit).stem}.o" for unit in units]
        runs = [
            subprocess.Popen([compiler, *build_flags(), *flags, "-Xptxas", "-v", "-c", "-o", str(obj),
                              str(folder / unit)], stderr=subprocess.PIPE, text=True)
            for (unit, flags), obj in zip(units.items(), objects)
        ]
        reports = [run.communicate()[1] for run in runs]
        for unit, run, report in zip(units, runs, reports):
            if run.returncode != 0:
                raise RuntimeError(f"nvcc failed on {unit}:\n{report[-4000:]}")
        partial = Path(scratch) / output.name
        linked = subprocess.run([compiler, *ARCH_FLAGS, "-shared", "-o", str(partial), *map(str, objects)],
                                capture_output=True, text=True)
        if linked.returncode != 0:
            raise RuntimeError(f"nvcc failed to link {output.name}:\n{linked.stderr[-4000:]}")
        partial.replace(output)
    return "".join(reports)


def _built() -> Path | None:
    """The library if it is already built: beside the sources (prebuilt), else in the cache directory."""
    for folder in (CSRC, Path(env.cache_dir())):
        if (folder / library_name()).is_file():
            return folder / library_name()
    return None


def cache_path() -> Path:
    """Where the library is built when no prebuilt one is beside the sources: in the cache directory."""
    return Path(env.cache_dir()) / library_name()


def library_path() -> Path:
    """The built library, compiled into the cache directory when it is not there yet."""
    built = _built()
    if built is None:
        built = cache_path()
        compile_library(built)
    return built


@functools.cache
def load() -> ctypes.CDLL:
    """The CUDA kernel library, built on first use."""
    return open_library(library_path())


def open_library(path: Path) -> ctypes.CDLL:
    """A built kernel library, its C functions given their argument types."""
    lib = ctypes.CDLL(str(path))
    p, i, f, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_longlong
    lib.fa3fp8_attn_fp8_fwd.restype = i
    lib.fa3fp8_attn_fp8_fwd.argtypes = [p] * 12 + [i] * 12 + [f] + [i] * 7 + [p, i64, i, i, p]
    lib.fa3fp8_attn_fwd.restype = i
    lib.fa3fp8_attn_fwd.argtypes = [p] * 7 + [i] * 8 + [f] + [i] * 7 + [p, i64, i, i, p]
    lib.fa3fp8_error_string.restype = ctypes.c_char_p
    lib.fa3fp8_error_string.argtypes = [i]
    lib.fa3fp8_splits_tail.restype = i
    lib.fa3fp8_splits_tail.argtypes = [i] * 2
    lib.fa3fp8_split_workspace_bytes.restype = i64
    lib.fa3fp8_split_workspace_bytes.argtypes = [i] * 4
    lib.fa3fp8_split_units.restype = i
    lib.fa3fp8_split_units.argtypes = [i] * 4
    lib.fa3fp8_split_parts.restype = i
    lib.fa3fp8_split_parts.argtypes = [i] * 3
    lib.fa3fp8_causal_split.restype = i
    lib.fa3fp8_causal_split.argtypes = [i] * 10 + [ctypes.POINTER(i)]
    lib.fa3fp8_causal_items.restype = None
    lib.fa3fp8_causal_items.argtypes = [i] * 4 + [ctypes.POINTER(i)] * 5
    lib.fa3fp8_tail_segments.restype = None
    lib.fa3fp8_tail_segments.argtypes = [i] * 4 + [ctypes.POINTER(i)] * 5
    lib.fa3fp8_fold_segments.restype = None
    lib.fa3fp8_fold_segments.argtypes = [i] * 3 + [ctypes.POINTER(i)] * 7
    lib.fa3fp8_fold_key_tiles.restype = i
    lib.fa3fp8_fold_key_tiles.argtypes = [i] * 4
    lib.fa3fp8_window_tiles.restype = i
    lib.fa3fp8_window_tiles.argtypes = [i] * 6 + [ctypes.POINTER(i)] * 5
    return lib


@functools.cache
def available() -> bool:
    """True when the library loads, built first if need be; False, with a warning, when it is not built and there is
    no nvcc, or the build or the load fails: the Triton kernel serves then. Asked once per process (the attention
    launcher asks on every FP8 call)."""
    if _built() is None and nvcc() is None:
        return False
    try:
        load()
    except (AttributeError, OSError, RuntimeError) as exc:  # a failed build or load, a missing symbol
        warnings.warn(f"fa3fp8: no CUDA kernel library, the Triton kernel serves: {exc}", RuntimeWarning)
        return False
    return True


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else CSRC
    compile_library(target / library_name())
    print(target / library_name())
