"""fa3fp8's environment switches: defaults, accepted values, clear errors."""

import pytest

from fa3fp8 import env


def test_kernel_defaults_to_auto(monkeypatch):
    monkeypatch.delenv("FA3FP8_KERNEL", raising=False)
    assert env.kernel() == "auto"


@pytest.mark.parametrize("value", ["triton", "cuda", " CUDA "])
def test_kernel_accepts_known_names(monkeypatch, value):
    monkeypatch.setenv("FA3FP8_KERNEL", value)
    assert env.kernel() == value.strip().lower()


def test_kernel_rejects_unknown_names(monkeypatch):
    monkeypatch.setenv("FA3FP8_KERNEL", "ws")  # the Gluon kernel, removed
    with pytest.raises(ValueError, match="FA3FP8_KERNEL"):
        env.kernel()


def test_nvcc_names_an_executable_or_nothing(monkeypatch, tmp_path):
    monkeypatch.delenv("FA3FP8_NVCC", raising=False)
    assert env.nvcc() is None
    (tmp_path / "nvcc").write_text("")
    monkeypatch.setenv("FA3FP8_NVCC", str(tmp_path / "nvcc"))
    assert env.nvcc() == str(tmp_path / "nvcc")
    monkeypatch.setenv("FA3FP8_NVCC", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="FA3FP8_NVCC"):
        env.nvcc()


def test_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("FA3FP8_CACHE_DIR", raising=False)
    assert env.cache_dir().endswith(".cache/fa3fp8")
    monkeypatch.setenv("FA3FP8_CACHE_DIR", str(tmp_path))
    assert env.cache_dir() == str(tmp_path)


def test_nvcc_flags(monkeypatch):
    monkeypatch.delenv("FA3FP8_NVCC_FLAGS", raising=False)
    assert env.nvcc_flags() == ()
    monkeypatch.setenv("FA3FP8_NVCC_FLAGS", " -Xptxas=-warn-spills  -lineinfo ")
    assert env.nvcc_flags() == ("-Xptxas=-warn-spills", "-lineinfo")


def test_interpreting_is_read_once_as_triton_reads_it(monkeypatch):
    from triton.runtime.interpreter import InterpretedFunction

    from fa3fp8 import quantize

    first = env.interpreting()
    assert first == isinstance(quantize._quantize_kernel, InterpretedFunction)  # decided when Triton decorated it
    monkeypatch.setenv("TRITON_INTERPRET", "0" if first else "1")
    assert env.interpreting() == first
