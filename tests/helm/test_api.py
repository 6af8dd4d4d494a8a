"""The API Deployment, Service, Ingress, HPA and PDB."""
from __future__ import annotations


def test_api_probes_use_readyz_for_readiness_and_healthz_for_liveness(default_manifests, chart):
    container = chart.one(default_manifests, "Deployment", "api")["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert container["args"] == ["api", "--host", "0.0.0.0", "--port", "8000"]


def test_hpa_owns_the_replica_count_and_pdb_keeps_one_pod(default_manifests, chart):
    deployment = chart.one(default_manifests, "Deployment", "api")
    hpa = chart.one(default_manifests, "HorizontalPodAutoscaler", "api")
    pdb = chart.one(default_manifests, "PodDisruptionBudget", "api")
    assert "replicas" not in deployment["spec"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]


def test_without_hpa_the_deployment_sets_replicas(render, chart):
    manifests = render({"api": {"autoscaling": {"enabled": False}, "replicas": 3}})
    assert chart.find(manifests, "HorizontalPodAutoscaler") == []
    assert chart.one(manifests, "Deployment", "api")["spec"]["replicas"] == 3


def test_ingress_routes_to_the_api_service(production_manifests, default_manifests, chart):
    assert chart.find(default_manifests, "Ingress") == []
    ingress = chart.one(production_manifests, "Ingress", "api")
    service = chart.one(production_manifests, "Service", "api")
    assert ingress["spec"]["ingressClassName"] == "alb"
    [rule] = ingress["spec"]["rules"]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": service["metadata"]["name"], "port": {"name": "http"}}


def test_service_selects_only_api_pods(default_manifests, chart):
    service = chart.one(default_manifests, "Service", "api")
    pod_labels = chart.one(default_manifests, "Deployment", "api")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "api"
