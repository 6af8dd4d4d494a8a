"""Secrets reach pods only through secretKeyRef: their values never appear in a ConfigMap, a pod spec or an
annotation, and an existing Secret replaces the chart's own."""
from __future__ import annotations

import base64
import json

import pytest

API_KEY_ENTRY = "acme:" + "5f" * 32
SENTINELS = {
    "secrets": {"apiKeys": [API_KEY_ENTRY], "s3AccessKeyId": "AKIASENTINELKEYID0001",
                "s3SecretAccessKey": "s3-secret-sentinel-value"},
    "flower": {"auth": {"password": "flower-password-sentinel"}},
}
SECRET_VALUES = [API_KEY_ENTRY, "AKIASENTINELKEYID0001", "s3-secret-sentinel-value", "flower-password-sentinel"]
SECRET_ENV = ("DOCFLASH_API_KEYS", "DOCFLASH_S3_ACCESS_KEY_ID", "DOCFLASH_S3_SECRET_ACCESS_KEY",
              "DOCFLASH_REDIS_PASSWORD", "FLOWER_BASIC_AUTH", "HF_TOKEN")


@pytest.fixture(scope="module")
def with_secrets(render, chart):
    return render(SENTINELS, api_versions=(chart.KEDA_API, chart.MONITORING_API))


def test_secret_values_appear_only_in_secret_objects(with_secrets):
    secrets = [m for m in with_secrets if m["kind"] == "Secret"]
    others = json.dumps([m for m in with_secrets if m["kind"] != "Secret"])
    for value in SECRET_VALUES:
        assert value not in others
        assert base64.b64encode(value.encode()).decode() not in others
        assert any(value in json.dumps(secret) for secret in secrets), value


def test_secret_environment_comes_from_secret_key_refs(with_secrets, production_manifests, chart):
    for manifests in (with_secrets, production_manifests):
        for where, pod in chart.pod_specs(manifests):
            for container in chart.containers(pod):
                for name, entry in chart.env_of(container).items():
                    if name in SECRET_ENV:
                        assert "value" not in entry and "secretKeyRef" in entry["valueFrom"], f"{where} {name}"


def test_api_reads_the_keys_from_the_chart_secret(with_secrets, chart):
    secret = next(m for m in with_secrets if m["kind"] == "Secret" and "api-keys" in m.get("stringData", {}))
    assert secret["stringData"]["api-keys"] == API_KEY_ENTRY
    api = chart.one(with_secrets, "Deployment", "api")["spec"]["template"]["spec"]["containers"][0]
    reference = chart.env_of(api)["DOCFLASH_API_KEYS"]["valueFrom"]["secretKeyRef"]
    assert reference == {"name": secret["metadata"]["name"], "key": "api-keys"}


def test_existing_secrets_replace_the_chart_secrets(render, chart):
    manifests = render({"secrets": {"existingSecret": "app-secrets"},
                        "flower": {"auth": {"existingSecret": "flower-auth"}}})
    assert chart.find(manifests, "Secret") == []
    for _, pod in chart.pod_specs(manifests):
        for container in chart.containers(pod):
            for entry in chart.env_of(container).values():
                reference = entry.get("valueFrom", {}).get("secretKeyRef")
                if reference and reference["key"] in ("api-keys", "s3-access-key-id", "s3-secret-access-key"):
                    assert reference["name"] == "app-secrets"
                if reference and reference["key"] == "basic-auth":
                    assert reference["name"] == "flower-auth"


def test_s3_keys_are_optional_so_irsa_works_without_them(default_manifests, production_manifests, chart):
    account = chart.one(production_manifests, "ServiceAccount")
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    assert account["automountServiceAccountToken"] is False
    worker = chart.one(default_manifests, "Deployment", "worker")["spec"]["template"]["spec"]["containers"][0]
    for name in ("DOCFLASH_S3_ACCESS_KEY_ID", "DOCFLASH_S3_SECRET_ACCESS_KEY"):
        assert chart.env_of(worker)[name]["valueFrom"]["secretKeyRef"]["optional"] is True
    chart_secret = next(m for m in default_manifests if m["kind"] == "Secret" and "api-keys" in m["stringData"])
    assert "s3-access-key-id" not in chart_secret["stringData"]


def test_external_redis_password_is_spliced_in_by_the_kubelet(production_manifests, chart):
    for _, pod in chart.pod_specs(production_manifests):
        for container in pod["containers"]:
            env = container.get("env", [])
            names = [entry["name"] for entry in env]
            if "DOCFLASH_REDIS_URL" not in names:
                continue
            # $(VAR) only expands variables defined earlier in the list.
            assert names.index("DOCFLASH_REDIS_PASSWORD") < names.index("DOCFLASH_REDIS_URL")
            url = env[names.index("DOCFLASH_REDIS_URL")]["value"]
            assert url.startswith("rediss://:$(DOCFLASH_REDIS_PASSWORD)@") and url.endswith("?ssl_cert_reqs=required")


def test_pods_roll_when_configuration_or_secrets_change(render, chart):
    before = render({"config": {"logLevel": "INFO"}, "flower": {"auth": {"password": "first-pass"}}})
    after = render({"config": {"logLevel": "DEBUG"}, "flower": {"auth": {"password": "second-pass"}}})
    for component in ("api", "worker", "flower", "watcher"):
        old = chart.one(before, "Deployment", component)["spec"]["template"]["metadata"]["annotations"]
        new = chart.one(after, "Deployment", component)["spec"]["template"]["metadata"]["annotations"]
        assert old["checksum/config"] != new["checksum/config"], component
        assert old["checksum/secrets"] != new["checksum/secrets"], component
