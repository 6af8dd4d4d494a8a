"""The custom resources kubernetes-validate has no schema for (KEDA ScaledObject and TriggerAuthentication,
Prometheus Operator ServiceMonitor), checked against closed schemas of the fields their CRDs define, so that a
misspelt or mistyped field fails here rather than on the cluster."""
from __future__ import annotations

import jsonschema
import pytest

INT = {"type": "integer", "minimum": 0}
STRING = {"type": "string", "minLength": 1}


def closed(properties: dict, required: list[str] = ()) -> dict:
    return {"type": "object", "additionalProperties": False, "properties": properties, "required": list(required)}


METADATA = {"type": "object", "required": ["name", "labels"]}
HPA_POLICY = closed({"type": {"enum": ["Pods", "Percent"]}, "value": {"type": "integer", "minimum": 1},
                     "periodSeconds": {"type": "integer", "minimum": 1, "maximum": 1800}},
                    ["type", "value", "periodSeconds"])
HPA_RULES = closed({"stabilizationWindowSeconds": {"type": "integer", "minimum": 0, "maximum": 3600},
                    "selectPolicy": {"enum": ["Max", "Min", "Disabled"]},
                    "policies": {"type": "array", "minItems": 1, "items": HPA_POLICY}})

SCALED_OBJECT = closed({
    "apiVersion": {"const": "keda.sh/v1alpha1"}, "kind": {"const": "ScaledObject"}, "metadata": METADATA,
    "spec": closed({
        "scaleTargetRef": closed({"apiVersion": STRING, "kind": STRING, "name": STRING,
                                  "envSourceContainerName": STRING},
                                 ["name"]),
        "pollingInterval": INT, "cooldownPeriod": INT, "initialCooldownPeriod": INT, "idleReplicaCount": INT,
        "minReplicaCount": INT, "maxReplicaCount": {"type": "integer", "minimum": 1},
        "advanced": closed({
            "restoreToOriginalReplicaCount": {"type": "boolean"},
            "horizontalPodAutoscalerConfig": closed({"name": STRING, "behavior": closed({"scaleUp": HPA_RULES,
                                                                                          "scaleDown": HPA_RULES})}),
            "scalingModifiers": closed({"formula": STRING, "target": STRING, "activationTarget": STRING,
                                        "metricType": {"enum": ["AverageValue", "Value"]}}, ["formula", "target"]),
        }),
        "triggers": {"type": "array", "minItems": 1, "items": closed({
            "type": STRING, "name": STRING, "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
            "useCachedMetrics": {"type": "boolean"},
            "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
            "authenticationRef": closed({"name": STRING,
                                         "kind": {"enum": ["TriggerAuthentication", "ClusterTriggerAuthentication"]}},
                                        ["name"]),
        }, ["type", "metadata"])},
    }, ["scaleTargetRef", "triggers"]),
}, ["apiVersion", "kind", "metadata", "spec"])

TRIGGER_AUTHENTICATION = closed({
    "apiVersion": {"const": "keda.sh/v1alpha1"}, "kind": {"const": "TriggerAuthentication"}, "metadata": METADATA,
    "spec": closed({"secretTargetRef": {"type": "array", "minItems": 1, "items": closed(
        {"parameter": STRING, "name": STRING, "key": STRING}, ["parameter", "name", "key"])}}),
}, ["apiVersion", "kind", "metadata", "spec"])

SERVICE_MONITOR = closed({
    "apiVersion": {"const": "monitoring.coreos.com/v1"}, "kind": {"const": "ServiceMonitor"}, "metadata": METADATA,
    "spec": closed({
        "selector": closed({"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}},
                           ["matchLabels"]),
        "namespaceSelector": {"type": "object"},
        "endpoints": {"type": "array", "minItems": 1, "items": closed(
            {"port": STRING, "path": {"type": "string", "pattern": "^/"},
             "interval": {"type": "string", "pattern": "^[0-9]+(s|m|h)$"},
             "scheme": {"enum": ["http", "https"]}}, ["port"])},
    }, ["selector", "endpoints"]),
}, ["apiVersion", "kind", "metadata", "spec"])

SCHEMAS = {"ScaledObject": SCALED_OBJECT, "TriggerAuthentication": TRIGGER_AUTHENTICATION,
           "ServiceMonitor": SERVICE_MONITOR}


@pytest.mark.parametrize("kind", SCHEMAS, ids=list(SCHEMAS))
def test_custom_resource_has_the_crd_shape(production_manifests, chart, kind):
    [resource] = chart.find(production_manifests, kind)
    jsonschema.validate(resource, SCHEMAS[kind])


def test_shape_check_catches_a_misspelt_field(production_manifests, chart):
    resource = chart.one(production_manifests, "ScaledObject")
    broken = {**resource, "spec": {**resource["spec"], "minReplicasCount": 1}}
    with pytest.raises(jsonschema.ValidationError, match="minReplicasCount"):
        jsonschema.validate(broken, SCALED_OBJECT)
