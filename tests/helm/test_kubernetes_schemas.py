"""Every rendered core object validates strictly against the Kubernetes 1.30 OpenAPI schemas (kubernetes-validate,
offline). Custom resources (KEDA, Prometheus Operator) have no schema there: they are set aside by name here and
checked against closed schemas of their CRD fields in test_custom_resources.py."""
from __future__ import annotations

import kubernetes_validate
import pytest

KUBERNETES_VERSION = "1.30.0"
CUSTOM_RESOURCES = {
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
}

VARIANTS = {
    "defaults": ({}, ()),
    "keda-and-servicemonitor": ({}, ("keda", "monitoring")),
    "ingress-tls-no-hpa": (
        {"api": {"ingress": {"enabled": True, "className": "nginx",
                             "tls": [{"secretName": "api-tls", "hosts": ["docflash.example.com"]}]},
                 "autoscaling": {"enabled": False}}},
        (),
    ),
    "model-from-pvc": ({"worker": {"model": {"source": "pvc", "pvc": {"claimName": "models", "path": "qwen"}}}}, ()),
    "model-from-s3": ({"worker": {"model": {"source": "s3", "s3": {"uri": "s3://models/qwen/"}}}}, ()),
    "hub-token-and-shared-cache": (
        {"worker": {"model": {"hub": {"tokenSecret": {"name": "hf", "key": "token"}, "cacheClaim": "hf-cache"}}}},
        (),
    ),
    "flower-persistent-existing-secrets": (
        {"flower": {"persistence": {"enabled": True}, "auth": {"existingSecret": "flower-auth"}},
         "secrets": {"existingSecret": "app-secrets"}},
        (),
    ),
    "external-redis-no-networkpolicy": (
        {"redis": {"enabled": False, "external": {"url": "redis://redis.example:6379/2"}},
         "networkPolicy": {"enabled": False}},
        (),
    ),
}


def _validate_all(manifests: list[dict]) -> list[str]:
    errors = []
    for manifest in manifests:
        if (manifest["apiVersion"], manifest["kind"]) in CUSTOM_RESOURCES:
            continue
        try:
            kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{manifest['kind']}/{manifest['metadata']['name']}: {exc.message} at {list(exc.path)}")
    return errors


@pytest.mark.parametrize("variant", VARIANTS, ids=list(VARIANTS))
def test_rendered_objects_validate_strictly(render, chart, variant):
    values, apis = VARIANTS[variant]
    api_versions = tuple({"keda": chart.KEDA_API, "monitoring": chart.MONITORING_API}[api] for api in apis)
    manifests = render(values, api_versions=api_versions)
    assert _validate_all(manifests) == []


def test_production_values_validate_strictly(production_manifests):
    assert _validate_all(production_manifests) == []
    kinds = {(m["apiVersion"], m["kind"]) for m in production_manifests}
    assert CUSTOM_RESOURCES <= kinds


def test_validator_rejects_an_unknown_field(default_manifests, chart):
    """The strict check is live: a field Kubernetes does not know fails it."""
    deployment = chart.one(default_manifests, "Deployment", "api")
    broken = {**deployment, "spec": {**deployment["spec"], "replicasTypo": 3}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)
