"""Renders the chart with the real helm v4 binary (.tools/helm, fetched by scripts/fetch_helm.sh) and hands the
manifests to the tests as parsed YAML documents."""
from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
HELM = REPO / ".tools" / "helm"
CHART = REPO / "helm" / "docflash"
PRODUCTION_VALUES = REPO / "helm" / "values-production.yaml"
KEDA_API = "keda.sh/v1alpha1/ScaledObject"
MONITORING_API = "monitoring.coreos.com/v1/ServiceMonitor"
RELEASE = "df"


class RenderError(Exception):
    """helm refused to render; the message is helm's stderr."""


@pytest.fixture(scope="session")
def helm() -> Path:
    """The helm binary; fails in CI and skips elsewhere when it has not been fetched."""
    if not HELM.is_file():
        message = f"{HELM} is missing: run `bash scripts/fetch_helm.sh` (scripts/setup.sh --dev does)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return HELM


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess:
    """Run helm with `args`; returns the completed process (never raises on a non-zero exit)."""
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=60, cwd=REPO)


@pytest.fixture(scope="session")
def render(helm: Path, tmp_path_factory) -> Callable[..., list[dict]]:
    """render(values=None, *files, api_versions=()) -> the manifests of `helm template`, as dicts.

    `values` is a dict merged over the chart defaults (written to a values file), `files` are more values files,
    `api_versions` are API versions the simulated cluster serves (e.g. KEDA_API). Raises RenderError."""
    directory = tmp_path_factory.mktemp("values")

    def _render(values: dict | None = None, *files: Path, api_versions: tuple[str, ...] = ()) -> list[dict]:
        args = ["template", RELEASE, str(CHART), "--namespace", "docflash"]
        for file in files:
            args += ["-f", str(file)]
        if values:
            path = directory / f"values-{len(list(directory.iterdir()))}.yaml"
            path.write_text(yaml.safe_dump(values))
            args += ["-f", str(path)]
        for api in api_versions:
            args += ["--api-versions", api]
        result = run_helm(helm, *args)
        if result.returncode != 0:
            raise RenderError(result.stderr)
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    return _render


@pytest.fixture(scope="session")
def default_manifests(render) -> list[dict]:
    """The chart rendered with its defaults, on a cluster without KEDA or the Prometheus Operator."""
    return render()


@pytest.fixture(scope="session")
def production_manifests(render) -> list[dict]:
    """The chart rendered with helm/values-production.yaml on a cluster with KEDA and the Prometheus Operator."""
    return render(None, PRODUCTION_VALUES, api_versions=(KEDA_API, MONITORING_API))


def find(manifests: list[dict], kind: str, component: str | None = None) -> list[dict]:
    """The manifests of `kind` (and, if given, of the app.kubernetes.io/component `component`)."""
    return [
        m for m in manifests
        if m["kind"] == kind
        and (component is None or m["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component)
    ]


def one(manifests: list[dict], kind: str, component: str | None = None) -> dict:
    """The single manifest of `kind` (and `component`); fails the test if there is not exactly one."""
    found = find(manifests, kind, component)
    assert len(found) == 1, f"expected one {kind} {component or ''}, found {len(found)}"
    return found[0]


def pod_specs(manifests: list[dict]) -> list[tuple[str, dict]]:
    """(kind/name, pod spec) of every workload and test pod in `manifests`."""
    specs = []
    for m in manifests:
        if m["kind"] in ("Deployment", "StatefulSet"):
            specs.append((f"{m['kind']}/{m['metadata']['name']}", m["spec"]["template"]["spec"]))
        elif m["kind"] == "Pod":
            specs.append((f"Pod/{m['metadata']['name']}", m["spec"]))
    return specs


def containers(pod_spec: dict) -> list[dict]:
    """Init and regular containers of a pod spec."""
    return pod_spec.get("initContainers", []) + pod_spec["containers"]


def env_of(container: dict) -> dict[str, dict]:
    """The container's env entries by name."""
    return {entry["name"]: entry for entry in container.get("env", [])}


@pytest.fixture(scope="session")
def chart():
    """Helpers over rendered manifests, for the test modules (which cannot import this conftest)."""
    return ChartHelpers


class ChartHelpers:
    """Namespace of the helpers above, handed to tests by the `chart` fixture."""

    find = staticmethod(find)
    one = staticmethod(one)
    pod_specs = staticmethod(pod_specs)
    containers = staticmethod(containers)
    env_of = staticmethod(env_of)
    run_helm = staticmethod(run_helm)
    RenderError = RenderError
    CHART = CHART
    PRODUCTION_VALUES = PRODUCTION_VALUES
    KEDA_API = KEDA_API
    MONITORING_API = MONITORING_API
