"""Pod hardening (non-root, read-only root filesystem, no capabilities) and the NetworkPolicies."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("which", ["defaults", "production"])
def test_every_pod_runs_hardened(default_manifests, production_manifests, chart, which):
    manifests = default_manifests if which == "defaults" else production_manifests
    specs = chart.pod_specs(manifests)
    assert len(specs) >= 6
    for where, pod in specs:
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert pod["automountServiceAccountToken"] is False, where
        for container in chart.containers(pod):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["capabilities"]["drop"] == ["ALL"], where
            assert "limits" in container["resources"] and "memory" in container["resources"]["limits"], where


@pytest.mark.parametrize("which", ["defaults", "production"])
def test_pods_meet_the_restricted_pod_security_standard_volumes(default_manifests, production_manifests, chart, which):
    manifests = default_manifests if which == "defaults" else production_manifests
    allowed = {"emptyDir", "persistentVolumeClaim", "configMap", "secret", "projected"}
    for where, pod in chart.pod_specs(manifests):
        for volume in pod.get("volumes", []):
            assert set(volume) - {"name"} <= allowed, f"{where}: {volume}"
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC"), where
        for container in chart.containers(pod):
            assert all("hostPort" not in port for port in container.get("ports", [])), where


def test_redis_accepts_only_this_release(default_manifests, chart):
    [policy] = [p for p in chart.find(default_manifests, "NetworkPolicy") if p["metadata"]["name"].endswith("-redis")]
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 6379, "protocol": "TCP"}]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "docflash",
                                                             "app.kubernetes.io/instance": "df"}}}]


def test_workers_and_watcher_accept_no_ingress(default_manifests, chart):
    [policy] = [p for p in chart.find(default_manifests, "NetworkPolicy")
                if p["metadata"]["name"].endswith("-no-ingress")]
    assert policy["spec"]["policyTypes"] == ["Ingress"] and "ingress" not in policy["spec"]
    components = next(e for e in policy["spec"]["podSelector"]["matchExpressions"]
                      if e["key"] == "app.kubernetes.io/component")
    assert sorted(components["values"]) == ["watcher", "worker"]


@pytest.mark.parametrize("component, source", [
    ("api", {"ipBlock": {"cidr": "10.0.0.0/16"}}),
    ("flower", {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}),
], ids=["api", "flower"])
def test_sources_can_be_restricted(production_manifests, chart, component, source):
    [policy] = [p for p in chart.find(production_manifests, "NetworkPolicy")
                if p["metadata"]["name"].endswith(f"-{component}")]
    sources = policy["spec"]["ingress"][0]["from"]
    assert source in sources
    # The release's own pods (helm test) still get in.
    assert {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "docflash",
                                            "app.kubernetes.io/instance": "df"}}} in sources


def test_api_and_flower_are_open_by_default(default_manifests, chart):
    for component in ("api", "flower"):
        [policy] = [p for p in chart.find(default_manifests, "NetworkPolicy")
                    if p["metadata"]["name"].endswith(f"-{component}")]
        assert "from" not in policy["spec"]["ingress"][0]


def test_helm_tests_check_readiness_and_flower_auth(default_manifests, chart):
    pods = {p["metadata"]["name"]: p for p in chart.find(default_manifests, "Pod")}
    assert set(pods) == {"df-docflash-test-readyz", "df-docflash-test-flower"}
    for pod in pods.values():
        assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
        assert pod["spec"]["restartPolicy"] == "Never"
    assert "/readyz" in pods["df-docflash-test-readyz"]["spec"]["containers"][0]["command"][2]
    assert "401" in pods["df-docflash-test-flower"]["spec"]["containers"][0]["command"][2]
