"""Loads the scripts under docker/ (they are not part of a package) as modules for the tests."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"


@pytest.fixture(scope="session")
def docker_script():
    """docker_script("requirements") -> the module docker/requirements.py."""
    loaded: dict[str, ModuleType] = {}

    def load(name: str) -> ModuleType:
        if name not in loaded:
            spec = importlib.util.spec_from_file_location(f"docker_{name}", DOCKER / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            loaded[name] = module
        return loaded[name]

    return load
