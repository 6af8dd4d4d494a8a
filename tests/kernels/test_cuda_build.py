"""Building the CUDA kernel library: names follow every source and each unit's options, units link into one library,
failures say what nvcc said, a built library is found before anything is compiled."""

import ctypes
import subprocess
import tomllib
from pathlib import Path

import pytest

from fa3fp8 import cuda_build

needs_nvcc = pytest.mark.skipif(cuda_build.nvcc() is None, reason="needs nvcc")


def test_nvcc_is_the_experiments_then_the_pinned_toolchains_then_paths(tmp_path, monkeypatch):
    wheel_nvcc = tmp_path / "site" / "nvidia" / "cu13" / "bin" / "nvcc"
    wheel_nvcc.parent.mkdir(parents=True)
    wheel_nvcc.write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert cuda_build.toolchain_nvcc() == cuda_build.nvcc() == str(wheel_nvcc)
    other = tmp_path / "other" / "nvcc"
    other.parent.mkdir()
    other.write_text("")
    monkeypatch.setenv("FA3FP8_NVCC", str(other))
    assert cuda_build.nvcc() == str(other)  # a compiler experiment's nvcc comes first
    monkeypatch.delenv("FA3FP8_NVCC")
    monkeypatch.setattr(cuda_build, "toolchain_nvcc", lambda: None)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    (tmp_path / "cuda" / "bin" / "nvcc").write_text("")
    assert cuda_build.nvcc() == str(tmp_path / "cuda" / "bin" / "nvcc")


@pytest.mark.skipif(cuda_build.toolchain_nvcc() is None, reason="needs the cuda-build wheels")
def test_the_library_is_built_by_the_pinned_compiler():
    pins = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    nvcc_pin = next(p for p in pins["project"]["optional-dependencies"]["cuda-build"] if "nvidia-cuda-nvcc" in p)
    version = subprocess.run([cuda_build.nvcc(), "--version"], capture_output=True, text=True, check=True).stdout
    assert f"V{nvcc_pin.split('==')[1]}" in version


def test_library_name_follows_every_source_and_each_units_options(tmp_path):
    (tmp_path / "k.cu").write_text('#include "k.cuh"\n')
    (tmp_path / "k.cuh").write_text("int x;")
    units = {"k.cu": ()}
    name = cuda_build.library_name(tmp_path, units)
    assert name.startswith("libk-") and name.endswith(".so")
    (tmp_path / "k.cuh").write_text("int y;")
    assert cuda_build.library_name(tmp_path, units) != name
    (tmp_path / "k.cuh").write_text("int x;")
    assert cuda_build.library_name(tmp_path, units) == name
    assert cuda_build.library_name(tmp_path, {"k.cu": ("-Xptxas", "--register-usage-level=8")}) != name


def test_library_name_follows_the_environments_nvcc_flags(tmp_path, monkeypatch):
    (tmp_path / "k.cu").write_text("int x;")
    monkeypatch.delenv("FA3FP8_NVCC_FLAGS", raising=False)
    name = cuda_build.library_name(tmp_path, {"k.cu": ()})
    monkeypatch.setenv("FA3FP8_NVCC_FLAGS", "-lineinfo")
    assert cuda_build.build_flags() == (*cuda_build.FLAGS, "-lineinfo")
    assert cuda_build.library_name(tmp_path, {"k.cu": ()}) != name


@needs_nvcc
def test_compile_error_reports_nvcc_output(tmp_path):
    (tmp_path / "good.cu").write_text("int good() { return 1; }\n")
    (tmp_path / "bad.cu").write_text("this is not C++\n")
    with pytest.raises(RuntimeError, match="nvcc failed on bad.cu"):
        cuda_build.compile_library(tmp_path / "out" / "libbad.so", tmp_path, {"good.cu": (), "bad.cu": ()})
    assert not list((tmp_path / "out").iterdir())  # no partial library or object left behind


@needs_nvcc
def test_units_link_into_one_library(tmp_path):
    """Each unit gets its own options (here a macro): the library holds both units' functions."""
    (tmp_path / "a.cu").write_text('extern "C" int from_a() { return VALUE; }\n')
    (tmp_path / "b.cu").write_text('extern "C" int from_b() { return VALUE; }\n')
    library = tmp_path / "out" / "liba.so"
    cuda_build.compile_library(library, tmp_path, {"a.cu": ("-DVALUE=1",), "b.cu": ("-DVALUE=2",)})
    loaded = ctypes.CDLL(str(library))
    assert (loaded.from_a(), loaded.from_b()) == (1, 2)


@needs_nvcc
def test_environments_nvcc_flags_reach_every_unit(tmp_path, monkeypatch):
    (tmp_path / "a.cu").write_text('extern "C" int from_a() { return VALUE; }\n')
    monkeypatch.setenv("FA3FP8_NVCC_FLAGS", "-DVALUE=7")
    library = tmp_path / "out" / "liba.so"
    cuda_build.compile_library(library, tmp_path, {"a.cu": ()})
    assert ctypes.CDLL(str(library)).from_a() == 7


@pytest.fixture
def fresh_availability():
    """available() is asked, and the library loaded, once per process: these tests do both again (a library another
    test loaded would answer for theirs), and leave no answer behind."""
    cuda_build.available.cache_clear()
    cuda_build.load.cache_clear()
    yield
    cuda_build.available.cache_clear()
    cuda_build.load.cache_clear()


def test_built_library_is_found_without_nvcc(tmp_path, monkeypatch):
    monkeypatch.setenv("FA3FP8_CACHE_DIR", str(tmp_path))
    (tmp_path / cuda_build.library_name()).write_bytes(b"")
    monkeypatch.setattr(cuda_build, "nvcc", lambda: None)
    assert cuda_build.library_path() == tmp_path / cuda_build.library_name() == cuda_build.cache_path()


def test_a_library_that_does_not_load_leaves_triton_serving(tmp_path, monkeypatch, fresh_availability):
    monkeypatch.setenv("FA3FP8_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_build, "CSRC", tmp_path)
    monkeypatch.setattr(cuda_build, "UNITS", {"attn.cu": ()})
    (tmp_path / "attn.cu").write_text("// a library that is not one\n")
    (tmp_path / cuda_build.library_name()).write_bytes(b"not an ELF file")
    with pytest.warns(RuntimeWarning, match="the Triton kernel serves"):
        assert not cuda_build.available()


def test_unavailable_without_nvcc_or_library(tmp_path, monkeypatch, fresh_availability):
    monkeypatch.setenv("FA3FP8_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_build, "nvcc", lambda: None)
    monkeypatch.setattr(cuda_build, "CSRC", tmp_path)
    monkeypatch.setattr(cuda_build, "UNITS", {"attn.cu": ()})
    (tmp_path / "attn.cu").write_text("// nothing built\n")
    assert not cuda_build.available()
