"""Flower: basic auth from a Secret, optional persistent state, Prometheus scraping, and the ServiceMonitor."""
from __future__ import annotations

import pytest


def _flower(manifests, chart):
    return chart.one(manifests, "Deployment", "flower")["spec"]["template"]


def test_basic_auth_comes_from_a_generated_secret(default_manifests, chart):
    template = _flower(default_manifests, chart)
    reference = chart.env_of(template["spec"]["containers"][0])["FLOWER_BASIC_AUTH"]["valueFrom"]["secretKeyRef"]
    secret = next(m for m in default_manifests if m["kind"] == "Secret" and m["metadata"]["name"] == reference["name"])
    user, password = secret["stringData"][reference["key"]].split(":")
    assert user == "admin" and len(password) == 24 and password == secret["stringData"]["password"]


@pytest.mark.parametrize("persistent", [False, True], ids=["ephemeral", "persistent"])
def test_state_persistence(render, chart, persistent):
    manifests = render({"flower": {"persistence": {"enabled": persistent}}})
    template = _flower(manifests, chart)
    container = template["spec"]["containers"][0]
    [data] = [v for v in template["spec"]["volumes"] if v["name"] == "data"]
    assert {"name": "data", "mountPath": "/var/lib/flower"} in container["volumeMounts"]
    if persistent:
        # The state file goes to the mounted volume; the root filesystem is read-only.
        assert container["args"] == ["flower", "--persistent", "--db", "/var/lib/flower/flower.db"]
        claim = chart.one(manifests, "PersistentVolumeClaim", "flower")
        assert data["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    else:
        assert container["args"] == ["flower"]
        assert "emptyDir" in data and chart.find(manifests, "PersistentVolumeClaim") == []
    assert chart.one(manifests, "Deployment", "flower")["spec"]["strategy"] == {"type": "Recreate"}


def test_scrape_annotations_point_at_the_metrics_ports(default_manifests, chart):
    for component, port in (("flower", "5555"), ("api", "8000")):
        annotations = (
            chart.one(default_manifests, "Deployment", component)["spec"]["template"]["metadata"]["annotations"]
        )
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == port
        assert annotations["prometheus.io/path"] == "/metrics"


def test_servicemonitor_selects_the_api_and_flower_services(production_manifests, default_manifests, chart):
    assert chart.find(default_manifests, "ServiceMonitor") == []
    monitor = chart.one(production_manifests, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = [s for s in chart.find(production_manifests, "Service")
                if selector.items() <= s["metadata"]["labels"].items()]
    assert sorted(s["metadata"]["labels"]["app.kubernetes.io/component"] for s in selected) == ["api", "flower"]
    for service in selected:
        assert "http" in [port["name"] for port in service["spec"]["ports"]]


def test_flower_can_be_left_out(render, chart):
    manifests = render({"flower": {"enabled": False}})
    assert not [m for m in manifests if m["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "flower"]
