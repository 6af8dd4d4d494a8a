"""The GPU worker Deployment: one GPU per pod, H100/H200 nodes only, shared memory, probes, shutdown, model source."""
from __future__ import annotations

import pytest

from core.settings import Settings


def _worker(manifests, chart):
    deployment = chart.one(manifests, "Deployment", "worker")
    return deployment, deployment["spec"]["template"]["spec"]


@pytest.mark.parametrize("which", ["defaults", "production"])
def test_each_pod_requests_and_limits_exactly_one_gpu(default_manifests, production_manifests, chart, which):
    manifests = default_manifests if which == "defaults" else production_manifests
    _, pod = _worker(manifests, chart)
    resources = pod["containers"][0]["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == 1
    assert resources["limits"]["nvidia.com/gpu"] == 1
    assert pod["containers"][0]["args"] == ["worker", "--gpu", "0"]


def test_worker_lands_only_on_h100_or_h200_nodes_and_tolerates_the_gpu_taint(default_manifests, chart):
    _, pod = _worker(default_manifests, chart)
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    [expression] = terms[0]["matchExpressions"]
    assert expression["key"] == "nvidia.com/gpu.product" and expression["operator"] == "In"
    assert expression["values"] and all(v.startswith(("NVIDIA-H100", "NVIDIA-H200")) for v in expression["values"])
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]


def test_dev_shm_is_memory_backed(default_manifests, chart):
    _, pod = _worker(default_manifests, chart)
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["emptyDir"]["medium"] == "Memory"
    assert volume["emptyDir"]["sizeLimit"] == "16Gi"


def test_triton_and_hub_caches_are_writable_volumes(default_manifests, chart):
    _, pod = _worker(default_manifests, chart)
    container = pod["containers"][0]
    env = chart.env_of(container)
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for variable in ("TRITON_CACHE_DIR", "HF_HOME"):
        path = env[variable]["value"]
        assert path in mounts and not mounts[path].get("readOnly", False), variable
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_probes_ping_celery_and_startup_covers_model_loading(default_manifests, chart):
    _, pod = _worker(default_manifests, chart)
    container = pod["containers"][0]
    startup, liveness = container["startupProbe"], container["livenessProbe"]
    # The pod's only worker is gpu0@<pod>: ping exactly that node rather than broadcast to all.
    assert startup["exec"]["command"] == ["docflash", "ping-worker", "--gpu", "0"]
    assert liveness["exec"]["command"] == ["docflash", "ping-worker", "--gpu", "0"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 15 * 60
    assert liveness["timeoutSeconds"] < liveness["periodSeconds"]
    assert "readinessProbe" not in container


@pytest.mark.parametrize("which", ["defaults", "production"])
def test_grace_period_lets_the_running_document_finish(default_manifests, production_manifests, chart, which):
    manifests = default_manifests if which == "defaults" else production_manifests
    _, pod = _worker(manifests, chart)
    config = chart.one(manifests, "ConfigMap")["data"]
    hard_limit = int(config["DOCFLASH_TASK_HARD_TIME_LIMIT"])
    assert pod["terminationGracePeriodSeconds"] > hard_limit
    assert hard_limit > int(config["DOCFLASH_TASK_SOFT_TIME_LIMIT"])


def test_rollout_never_needs_a_spare_gpu(default_manifests, chart):
    deployment, _ = _worker(default_manifests, chart)
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0


MODEL_SOURCES = {
    "hub": (
        {"source": "hub", "hub": {"id": "org/model-1M", "tokenSecret": {"name": "hf-token", "key": "token"}}},
        "org/model-1M",
    ),
    "pvc": ({"source": "pvc", "pvc": {"claimName": "models", "path": "org/model-1M"}}, "/models/org/model-1M"),
    "s3": ({"source": "s3", "s3": {"uri": "s3://models-bucket/org/model-1M/"}}, "/models/model"),
}


@pytest.mark.parametrize("source", MODEL_SOURCES, ids=list(MODEL_SOURCES))
def test_model_source(render, chart, source):
    model, expected_path = MODEL_SOURCES[source]
    _, pod = _worker(render({"worker": {"model": model}}), chart)
    container = pod["containers"][0]
    env = chart.env_of(container)
    assert env["DOCFLASH_LLM_MODEL"]["value"] == expected_path
    volumes = {v["name"]: v for v in pod["volumes"]}
    if source == "hub":
        assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "token"}
        assert "HF_HUB_OFFLINE" not in env and "initContainers" not in pod
    else:
        assert env["HF_HUB_OFFLINE"]["value"] == "1"
        assert {"name": "model", "mountPath": "/models", "readOnly": True} in container["volumeMounts"]
    if source == "pvc":
        assert volumes["model"]["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    if source == "s3":
        [init] = pod["initContainers"]
        assert init["command"] == ["python", "/opt/docflash/fetch_model.py", model["s3"]["uri"], "/models/model"]
        assert "emptyDir" in volumes["model"]
        assert {"name": "model", "mountPath": "/models"} in init["volumeMounts"]


@pytest.mark.parametrize(
    ("model", "served"),
    [
        ({"source": "hub", "hub": {"id": "org/model-1M"}}, "org/model-1M"),
        ({"source": "s3", "s3": {"uri": "s3://models-bucket/org/model-1M/"}}, None),
        ({"name": "org/model-1M", "source": "s3", "s3": {"uri": "s3://models-bucket/org/model-1M/"}}, "org/model-1M"),
    ],
    ids=["hub-id", "s3-unnamed", "s3-named"],
)
def test_every_pod_knows_the_model_name_jobs_may_ask_for(render, chart, model, served):
    """The API checks a job's model against DOCFLASH_SERVED_MODEL, so it lives in the shared ConfigMap."""
    data = chart.one(render({"worker": {"model": model}}), "ConfigMap")["data"]
    assert data.get("DOCFLASH_SERVED_MODEL") == served


def test_configmap_keys_are_settings_the_service_reads(default_manifests, production_manifests, chart):
    """Every DOCFLASH_* variable the chart sets names a field of core.settings.Settings."""
    fields = set(Settings.model_fields)
    for manifests in (default_manifests, production_manifests):
        names = set(chart.one(manifests, "ConfigMap")["data"])
        for _, pod in chart.pod_specs(manifests):
            for container in chart.containers(pod):
                names |= set(chart.env_of(container))
        names.discard("DOCFLASH_REDIS_PASSWORD")  # only spliced into DOCFLASH_REDIS_URL by the kubelet
        unknown = {n for n in names if n.startswith("DOCFLASH_") and n.removeprefix("DOCFLASH_").lower() not in fields}
        assert unknown == set()


def test_rendered_configuration_is_accepted_by_the_service_settings(default_manifests, chart):
    data = chart.one(default_manifests, "ConfigMap")["data"]
    _, pod = _worker(default_manifests, chart)
    env = {**data, "DOCFLASH_REDIS_URL": chart.env_of(pod["containers"][0])["DOCFLASH_REDIS_URL"]["value"]}
    settings = Settings(_env_file=None, **{k.removeprefix("DOCFLASH_").lower(): v for k, v in env.items()})
    assert settings.env == "production"
    assert settings.broker_visibility_timeout > settings.task_hard_time_limit
    assert settings.redis_url == "redis://df-docflash-redis.docflash.svc:6379/0"
