"""KEDA ScaledObject on the GPU queue's Redis lists: on when the cluster serves KEDA, shaped as KEDA expects, and
slow to scale down so that workers are not removed in the middle of a document."""
from __future__ import annotations

import pytest

from core.queues import queue_list_names

KEDA_CASES = {
    "auto-without-keda": ("auto", False, False),
    "auto-with-keda": ("auto", True, True),
    "forced-on": (True, False, True),
    "forced-off": (False, True, False),
}


@pytest.mark.parametrize("case", KEDA_CASES, ids=list(KEDA_CASES))
def test_scaledobject_follows_the_setting_and_the_cluster(render, chart, case):
    setting, cluster_has_keda, expected = KEDA_CASES[case]
    manifests = render(
        {"worker": {"autoscaling": {"keda": {"enabled": setting}}}},
        api_versions=(chart.KEDA_API,) if cluster_has_keda else (),
    )
    assert bool(chart.find(manifests, "ScaledObject")) is expected
    deployment = chart.one(manifests, "Deployment", "worker")
    # With KEDA the HPA owns the replica count: the chart must not reset it on upgrade.
    assert ("replicas" in deployment["spec"]) is (not expected)


def _scaled_object(render, chart, values=None):
    manifests = render(values, api_versions=(chart.KEDA_API,))
    return manifests, chart.one(manifests, "ScaledObject")


def test_scaledobject_watches_every_priority_list_of_the_gpu_queue(render, chart):
    manifests, scaled = _scaled_object(render, chart, {"config": {"gpuQueue": "gpu.long-docs"}})
    spec = scaled["spec"]
    triggers = spec["triggers"]
    assert [t["metadata"]["listName"] for t in triggers] == queue_list_names("gpu.long-docs")
    assert {t["type"] for t in triggers} == {"redis"}
    for trigger in triggers:
        assert all(isinstance(value, str) for value in trigger["metadata"].values())
        assert trigger["metadata"]["address"] == "df-docflash-redis.docflash.svc:6379"
    formula = spec["advanced"]["scalingModifiers"]["formula"]
    assert sorted(term.strip() for term in formula.split("+")) == sorted(t["name"] for t in triggers)
    assert spec["scaleTargetRef"]["name"] == chart.one(manifests, "Deployment", "worker")["metadata"]["name"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 8)


def test_scale_down_waits_out_the_longest_document(render, chart):
    manifests, scaled = _scaled_object(render, chart)
    hard_limit = int(chart.one(manifests, "ConfigMap")["data"]["DOCFLASH_TASK_HARD_TIME_LIMIT"])
    spec = scaled["spec"]
    scale_down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert scale_down["stabilizationWindowSeconds"] >= min(hard_limit, 3600)
    assert scale_down["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 300}]
    assert spec["cooldownPeriod"] >= hard_limit


def test_external_redis_with_password_uses_a_trigger_authentication(production_manifests, chart):
    scaled = chart.one(production_manifests, "ScaledObject")
    auth = chart.one(production_manifests, "TriggerAuthentication")
    for trigger in scaled["spec"]["triggers"]:
        assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
        assert trigger["metadata"]["enableTLS"] == "true"
        assert trigger["metadata"]["address"] == "master.docflash.abc123.use1.cache.amazonaws.com:6379"
    assert auth["spec"]["secretTargetRef"] == [
        {"parameter": "password", "name": "docflash-redis-auth", "key": "auth-token"}
    ]
    assert scaled["spec"]["minReplicaCount"] == 0


def test_keda_operator_may_reach_the_bundled_redis(render, chart):
    manifests, _ = _scaled_object(render, chart)
    [policy] = [p for p in chart.find(manifests, "NetworkPolicy") if p["metadata"]["name"].endswith("-redis")]
    sources = policy["spec"]["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}}} in sources
