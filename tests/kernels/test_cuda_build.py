"""Building the CUDA kernel library: cache names follow the source, failures say what nvcc said, a built library
is found before anything is compiled."""

import pytest

from fa3fp8 import cuda_build

needs_nvcc = pytest.mark.skipif(cuda_build.nvcc() is None, reason="needs nvcc")


def test_library_name_follows_the_source(tmp_path):
    a, b = tmp_path / "k.cu", tmp_path / "k2.cu"
    a.write_text("int x;")
    b.write_text("int y;")
    assert cuda_build.library_name(a).startswith("libk-") and cuda_build.library_name(a).endswith(".so")
    b.write_text("int x;")
    assert cuda_build.library_name(a).split("-")[1] == cuda_build.library_name(b).split("-")[1]
    b.write_text("int y;")
    assert cuda_build.library_name(a).split("-")[1] != cuda_build.library_name(b).split("-")[1]


@needs_nvcc
def test_compile_error_reports_nvcc_output(tmp_path):
    bad = tmp_path / "bad.cu"
    bad.write_text("this is not C++\n")
    with pytest.raises(RuntimeError, match="nvcc failed on bad.cu"):
        cuda_build.compile_source(bad, tmp_path / "out" / "libbad.so")
    assert not list((tmp_path / "out").glob("*.so"))  # no partial library left behind


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
    monkeypatch.setattr(cuda_build, "SOURCE", tmp_path / "attn.cu")
    (tmp_path / "attn.cu").write_text("// a library that is not one\n")
    (tmp_path / cuda_build.library_name()).write_bytes(b"not an ELF file")
    with pytest.warns(RuntimeWarning, match="the Triton kernel serves"):
        assert not cuda_build.available()


def test_unavailable_without_nvcc_or_library(tmp_path, monkeypatch, fresh_availability):
    monkeypatch.setenv("FA3FP8_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_build, "nvcc", lambda: None)
    monkeypatch.setattr(cuda_build, "SOURCE", tmp_path / "attn.cu")
    (tmp_path / "attn.cu").write_text("// nothing built\n")
    assert not cuda_build.available()
