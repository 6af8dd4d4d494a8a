"""Build and load fa3fp8's CUDA C++ kernels (`csrc/*.cu`) with nvcc: one shared library per source hash.

The library exposes plain C functions (no torch headers), so it builds the same way on a GPU machine, in a
Docker build stage or on a CPU-only CI machine that has nvcc (where the tests compile it for sm_90a and read
ptxas's report). `python -m fa3fp8.cuda_build DIR` builds it into DIR ahead of time; at run time the library is
looked up beside the source, then in `FA3FP8_CACHE_DIR`, and built there when missing.
"""

import ctypes
import functools
import hashlib
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from . import env

SOURCE = Path(__file__).parent / "csrc" / "attn_sm90.cu"
ARCH_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)  # wgmma and setmaxnreg exist only on sm_90a
FLAGS = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo", *ARCH_FLAGS)


def nvcc() -> str | None:
    """Path of nvcc: on PATH, else under CUDA_HOME; None when there is none."""
    found = shutil.which("nvcc")
    if found:
        return found
    candidate = Path(env.cuda_home()) / "bin" / "nvcc"
    return str(candidate) if candidate.is_file() else None


def library_name(source: Path = SOURCE) -> str:
    """File name of the built library: the source's stem and a hash of the source and the flags."""
    digest = hashlib.sha256(source.read_bytes() + " ".join(FLAGS).encode()).hexdigest()[:16]
    return f"lib{source.stem}-{digest}.so"


def compile_source(source: Path, output: Path, extra_flags: tuple[str, ...] = ()) -> str:
    """Run nvcc on `source` into `output` (written atomically); returns ptxas's report (`-Xptxas -v`)."""
    compiler = nvcc()
    if compiler is None:
        raise RuntimeError("nvcc not found: put it on PATH or set CUDA_HOME")
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=output.parent, suffix=".so", delete=False) as tmp:
        partial = Path(tmp.name)
    try:
        done = subprocess.run(
            [compiler, *FLAGS, *extra_flags, "-Xptxas", "-v", "-o", str(partial), str(source)],
            capture_output=True, text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"nvcc failed on {source.name}:\n{done.stderr[-4000:]}")
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
    return done.stderr


def _built() -> Path | None:
    """The library if it is already built: beside the source (prebuilt), else in the cache directory."""
    for folder in (SOURCE.parent, Path(env.cache_dir())):
        if (folder / library_name(SOURCE)).is_file():
            return folder / library_name(SOURCE)
    return None


def cache_path() -> Path:
    """Where the library is built when no prebuilt one is beside the source: in the cache directory."""
    return Path(env.cache_dir()) / library_name(SOURCE)


def library_path() -> Path:
    """The built library, compiled into the cache directory when it is not there yet."""
    built = _built()
    if built is None:
        built = cache_path()
        compile_source(SOURCE, built)
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
    lib.fa3fp8_attn_fp8_fwd.argtypes = [p] * 12 + [i] * 12 + [f] + [i] * 7 + [p, i64, p]
    lib.fa3fp8_attn_fwd.restype = i
    lib.fa3fp8_attn_fwd.argtypes = [p] * 7 + [i] * 8 + [f] + [i] * 7 + [p, i64, p]
    lib.fa3fp8_error_string.restype = ctypes.c_char_p
    lib.fa3fp8_error_string.argtypes = [i]
    lib.fa3fp8_split_workspace_bytes.restype = i64
    lib.fa3fp8_split_workspace_bytes.argtypes = [i] * 4
    lib.fa3fp8_split_units.restype = i
    lib.fa3fp8_split_units.argtypes = [i] * 4
    lib.fa3fp8_tail_segments.restype = None
    lib.fa3fp8_tail_segments.argtypes = [i] * 4 + [ctypes.POINTER(i)] * 5
    lib.fa3fp8_fold_segments.restype = None
    lib.fa3fp8_fold_segments.argtypes = [i] * 3 + [ctypes.POINTER(i)] * 7
    lib.fa3fp8_fold_key_tiles.restype = i
    lib.fa3fp8_fold_key_tiles.argtypes = [i] * 4
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
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else SOURCE.parent
    compile_source(SOURCE, target / library_name(SOURCE))
    print(target / library_name(SOURCE))
