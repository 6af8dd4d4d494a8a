"""The bundled Redis (StatefulSet, AOF, PVC) or an external one, and the singleton S3 watcher."""
from __future__ import annotations


def test_bundled_redis_keeps_an_append_only_file_on_a_volume(default_manifests, chart):
    statefulset = chart.one(default_manifests, "StatefulSet", "redis")
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    assert args[args.index("--dir") + 1] == "/data"
    [claim] = statefulset["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data" and claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
    assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]
    service = chart.one(default_manifests, "Service", "redis")
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]


def test_external_redis_replaces_the_statefulset(render, chart):
    manifests = render({"redis": {"enabled": False, "external": {"url": "rediss://cache.example:6380/3"}}},
                       api_versions=(chart.KEDA_API,))
    assert chart.find(manifests, "StatefulSet") == []
    worker = chart.one(manifests, "Deployment", "worker")["spec"]["template"]["spec"]["containers"][0]
    assert chart.env_of(worker)["DOCFLASH_REDIS_URL"]["value"] == "rediss://cache.example:6380/3?ssl_cert_reqs=required"
    trigger = chart.one(manifests, "ScaledObject")["spec"]["triggers"][0]["metadata"]
    assert (trigger["address"], trigger["databaseIndex"], trigger["enableTLS"]) == ("cache.example:6380", "3", "true")
    assert "authenticationRef" not in chart.one(manifests, "ScaledObject")["spec"]["triggers"][0]


def test_watcher_is_a_singleton_that_never_overlaps(default_manifests, chart):
    deployment = chart.one(default_manifests, "Deployment", "watcher")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"] == ["watch"]
    assert chart.one(default_manifests, "ConfigMap")["data"]["DOCFLASH_WATCH_URI"] == "s3://docflash/inbox/"


def test_api_flower_and_watcher_run_the_torch_free_image(default_manifests, chart):
    for component in ("api", "flower", "watcher"):
        image = (
            chart.one(default_manifests, "Deployment", component)["spec"]["template"]["spec"]["containers"][0]["image"]
        )
        assert image == "ghcr.io/docflash/docflash-api:0.1.0", component
    worker = chart.one(default_manifests, "Deployment", "worker")["spec"]["template"]["spec"]["containers"][0]
    assert worker["image"] == "ghcr.io/docflash/docflash-worker:0.1.0"
