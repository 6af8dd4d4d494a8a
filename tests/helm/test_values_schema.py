"""values.schema.json and the chart's cross-value checks refuse bad values, naming the value."""
from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

BAD_VALUES = {
    "unknown-top-level-key": ({"replicaCount": 3}, "replicaCount"),
    "unknown-nested-key": ({"worker": {"gpuCount": 2}}, "gpuCount"),
    "attention-impl-not-in-enum": ({"config": {"attentionImpl": "flash2"}}, "attentionImpl"),
    "env-not-in-enum": ({"config": {"env": "staging"}}, "env"),
    "output-uri-not-s3": ({"config": {"outputUri": "gs://bucket/out"}}, "outputUri"),
    "api-key-in-clear": ({"secrets": {"apiKeys": ["acme:my-plain-key"]}}, "apiKeys"),
    "gpu-not-hopper": ({"worker": {"gpuProducts": ["NVIDIA-A100-SXM4-80GB"]}}, "gpuProducts"),
    "no-gpu-products": ({"worker": {"gpuProducts": []}}, "gpuProducts"),
    "model-source-unknown": ({"worker": {"model": {"source": "nfs"}}}, "source"),
    "pvc-source-without-claim": ({"worker": {"model": {"source": "pvc"}}}, "claimName"),
    "s3-source-without-uri": ({"worker": {"model": {"source": "s3"}}}, "uri"),
    "keda-switch-typo": ({"worker": {"autoscaling": {"keda": {"enabled": "yes"}}}}, "enabled"),
    "stabilization-above-kubernetes-max": (
        {"worker": {"autoscaling": {"keda": {"scaleDownStabilizationSeconds": 7200}}}},
        "scaleDownStabilizationSeconds"),
    "redis-url-with-password": (
        {"redis": {"enabled": False, "external": {"url": "redis://:hunter2@redis:6379/0"}}}, "url"),
    "external-redis-without-url": ({"redis": {"enabled": False}}, "url"),
    "privilege-escalation": (
        {"containerSecurityContext": {"allowPrivilegeEscalation": True}}, "allowPrivilegeEscalation"),
    "root-pods": ({"podSecurityContext": {"runAsNonRoot": False}}, "runAsNonRoot"),
    "secret-in-extra-env": ({"config": {"extraEnv": {"DOCFLASH_API_KEYS": "x"}}}, "DOCFLASH_API_KEYS"),
    "extra-env-not-a-setting": ({"config": {"extraEnv": {"PATH": "/tmp"}}}, "PATH"),
    "negative-replicas": ({"api": {"replicas": -1}}, "replicas"),
}

BAD_COMBINATIONS = {
    "soft-limit-not-below-hard": ({"config": {"taskSoftTimeLimit": 3600}}, "config.taskSoftTimeLimit"),
    "visibility-timeout-too-short": ({"config": {"brokerVisibilityTimeout": 3000}}, "config.brokerVisibilityTimeout"),
    "grace-period-below-hard-limit": (
        {"worker": {"terminationGracePeriodSeconds": 600}}, "worker.terminationGracePeriodSeconds"),
    "stabilization-shorter-than-a-document": (
        {"worker": {"autoscaling": {"keda": {"scaleDownStabilizationSeconds": 300}}}}, "scaleDownStabilizationSeconds"),
    "cooldown-shorter-than-a-document": (
        {"worker": {"autoscaling": {"keda": {"cooldownPeriod": 300}}}}, "cooldownPeriod"),
    "min-above-max-workers": ({"worker": {"autoscaling": {"keda": {"minReplicas": 9}}}}, "minReplicas"),
    "watcher-without-uri": ({"config": {"watch": {"uri": ""}}}, "config.watch.uri"),
    "existing-secret-and-inline-keys": (
        {"secrets": {"existingSecret": "app", "apiKeys": ["acme:" + "ab" * 32]}}, "secrets.existingSecret"),
    "half-an-s3-key-pair": ({"secrets": {"s3AccessKeyId": "AKIAONLYHALF"}}, "s3SecretAccessKey"),
}


@pytest.mark.parametrize("case", BAD_VALUES, ids=list(BAD_VALUES))
def test_schema_rejects_bad_values(render, chart, case):
    values, named = BAD_VALUES[case]
    with pytest.raises(chart.RenderError, match=named):
        render(values)


@pytest.mark.parametrize("case", BAD_COMBINATIONS, ids=list(BAD_COMBINATIONS))
def test_chart_rejects_inconsistent_values(render, chart, case):
    values, named = BAD_COMBINATIONS[case]
    with pytest.raises(chart.RenderError, match=named.replace(".", r"\.")):
        render(values)


def test_schema_is_valid_and_accepts_the_shipped_values(chart):
    schema = json.loads((chart.CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    for path in (chart.CHART / "values.yaml", chart.PRODUCTION_VALUES):
        jsonschema.Draft7Validator(schema).validate(yaml.safe_load(path.read_text()))


def test_schema_closes_every_object_it_describes(chart):
    """Each object with declared properties refuses others (additionalProperties: false), except the security
    contexts, which pass Kubernetes fields through."""
    schema = json.loads((chart.CHART / "values.schema.json").read_text())
    open_objects = {"podSecurityContext", "containerSecurityContext", "capabilities"}
    unclosed = []

    def walk(node, path):
        if isinstance(node, dict):
            conditional = path[-1] in ("if", "then") or "if" in path or "then" in path
            if ("properties" in node and node.get("additionalProperties") is not False
                    and path[-1] not in open_objects and not conditional):
                unclosed.append("/".join(path))
            for key, child in node.items():
                walk(child, [*path, key])
        elif isinstance(node, list):
            for index, child in enumerate(node):
                walk(child, [*path, str(index)])

    walk(schema, ["#"])
    assert unclosed == []
