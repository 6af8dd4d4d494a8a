"""The two Dockerfiles: hadolint at its strictest, pinned bases, a non-root user, and a build context
(.dockerignore) that holds every file they copy."""
from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HADOLINT = Path(sys.executable).parent / "hadolint"
DOCKERFILES = {"api": REPO / "docker" / "api.Dockerfile", "worker": REPO / "docker" / "worker.Dockerfile"}


def hadolint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(HADOLINT), "--no-color", "--failure-threshold", "style", str(path)],
                          capture_output=True, text=True, timeout=60)


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(l for l in path.read_text().splitlines() if not l.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines() if line.strip()]


def final_stage(path: Path) -> list[tuple[str, str]]:
    steps = instructions(path)
    last_from = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[last_from:]


def ignored_by_dockerignore(relative: str) -> bool:
    """Docker's rule: the last .dockerignore pattern matching the path or one of its parents decides."""
    candidates = [relative] + [str(p) for p in Path(relative).parents if str(p) != "."]
    verdict = False
    for raw in (REPO / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/").replace("**/", "*").replace("**", "*")
        if any(fnmatch.fnmatch(c, pattern) for c in candidates):
            verdict = not negate
    return verdict


@pytest.mark.parametrize("image", DOCKERFILES, ids=list(DOCKERFILES))
def test_hadolint_finds_nothing(image):
    result = hadolint(DOCKERFILES[image])
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_flags_an_unpinned_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install flask\n")
    result = hadolint(bad)
    assert result.returncode != 0 and "DL3007" in result.stdout and "DL3013" in result.stdout


@pytest.mark.parametrize("image", DOCKERFILES, ids=list(DOCKERFILES))
def test_images_are_multi_stage_from_pinned_bases(image):
    steps = instructions(DOCKERFILES[image])
    assert sum(op == "FROM" for op, _ in steps) >= 2
    defaults = dict(re.findall(r"^(\w+_IMAGE)=(\S+)$", "\n".join(args for op, args in steps if op == "ARG"), re.M))
    assert defaults, "base image comes from an ARG default"
    for name, reference in defaults.items():
        assert re.search(r":\d+(\.\d+){2}", reference), f"{name}={reference} is not pinned to a full version"


@pytest.mark.parametrize("image", DOCKERFILES, ids=list(DOCKERFILES))
def test_final_stage_runs_docflash_as_a_numeric_non_root_user(image):
    steps = final_stage(DOCKERFILES[image])
    [user] = [args for op, args in steps if op == "USER"]
    uid_arg = re.search(r"APP_UID=(\d+)", " ".join(args for op, args in steps if op == "ARG")).group(1)
    assert user == "${APP_UID}:${APP_UID}" and int(uid_arg) >= 1000
    assert [args for op, args in steps if op == "ENTRYPOINT"] == ['["docflash"]']
    assert not any(re.search(r"(KEY|SECRET|TOKEN|PASSWORD)\w*=", args) for op, args in steps if op in ("ENV", "ARG"))


@pytest.mark.parametrize("image", DOCKERFILES, ids=list(DOCKERFILES))
def test_copied_files_exist_and_are_in_the_build_context(image):
    for op, args in instructions(DOCKERFILES[image]):
        if op != "COPY" or args.startswith("--from"):
            continue
        for source in args.split()[:-1]:
            assert (REPO / source).exists(), source
            assert not ignored_by_dockerignore(source.rstrip("/")), f"{source} is excluded by .dockerignore"


def test_build_context_leaves_out_local_state():
    for path in (
        ".venv/bin/python", ".git/HEAD", "tests/conftest.py", ".tools/helm", "docker/.env", "api/__pycache__/x.pyc"
    ):
        assert ignored_by_dockerignore(path), path


def test_api_image_never_installs_torch_and_worker_pins_the_cuda_build():
    api_runs = " ".join(args for op, args in instructions(DOCKERFILES["api"]) if op == "RUN")
    assert "torch" not in api_runs and "requirements.py api" in api_runs
    worker = dict(re.findall(r"ARG (TORCH_\w+)=(\S+)", DOCKERFILES["worker"].read_text()))
    assert worker["TORCH_VERSION"] == "2.11.0"
    assert worker["TORCH_INDEX_URL"].startswith("https://download.pytorch.org/whl/cu")


def test_worker_image_has_writable_triton_and_hub_caches():
    steps = final_stage(DOCKERFILES["worker"])
    env = " ".join(args for op, args in steps if op == "ENV")
    created = " ".join(args for op, args in steps if op == "RUN")
    for variable in ("TRITON_CACHE_DIR", "HF_HOME"):
        path = re.search(rf"{variable}=(\S+)", env).group(1)
        assert re.search(rf"install -d -o docflash -g docflash [^&]*{re.escape(path)}", created), variable
    # Triton compiles its launcher at run time.
    assert re.search(r"apt-get install [^&]*\bgcc\b[^&]*", created) and "python3-dev" in created
