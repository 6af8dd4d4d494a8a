"""docker/constraints.txt pins, to exact versions, every package the images install besides torch and triton."""
from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
DEPENDENCIES = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]


@pytest.fixture(scope="module")
def pin(docker_script):
    return docker_script("pin_constraints")


def committed_pins() -> dict[str, str]:
    lines = [l for l in (REPO / "docker" / "constraints.txt").read_text().splitlines() if l and not l.startswith("#")]
    pins = {}
    for line in lines:
        match = re.fullmatch(r"([a-z0-9-]+)==([0-9][\w.+!-]*)", line)
        assert match, f"not an exact pin: {line!r}"
        pins[match.group(1)] = match.group(2)
    return pins


def test_closure_follows_extras_and_stops_at_torch(pin):
    versions = pin.closure(["celery[redis]>=5.4", "sentence-transformers"])
    assert {"celery", "kombu", "redis", "sentence-transformers", "transformers", "huggingface-hub"} <= set(versions)
    assert not set(versions) & {"torch", "triton"}
    assert not any(name.startswith("nvidia-") for name in versions)


def test_every_package_the_images_pull_is_pinned(pin):
    """Every dependency of pyproject.toml, and every dependency of a pinned package, has a pin. Dependencies are
    read from the installed distributions, so only packages installed at their pinned version are followed: a
    newer release in a fresh environment may need other packages than the pinned one does."""
    pins = committed_pins()
    top_level = {canonicalize_name(Requirement(d).name) for d in DEPENDENCIES} - {"torch", "triton"}
    missing = set(top_level - set(pins))
    for name, version in pins.items():
        if metadata.version(name) != version:
            continue
        missing |= set(pin.closure([name])) - set(pins)
    assert not missing, f"run `.venv/bin/python docker/pin_constraints.py`; unpinned: {sorted(missing)}"
    assert not {"torch", "triton"} & set(pins)


def test_render_sorts_and_pins(pin):
    text = pin.render({"zeta": "1.0", "alpha-beta": "2.3.post1"})
    assert text.splitlines()[1:] == ["alpha-beta==2.3.post1", "zeta==1.0"]
    assert text.startswith("#")


def test_pinned_names_are_canonical():
    for name in committed_pins():
        assert canonicalize_name(name) == name
