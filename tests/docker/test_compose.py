"""docker/compose.yaml: the one-GPU-host stack is complete, wired together, takes its secrets from the
environment, and gives the service settings it accepts."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from core.settings import Settings

REPO = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO / "docker" / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]
SECRET_VARIABLES = {"DOCFLASH_S3_ACCESS_KEY_ID", "DOCFLASH_S3_SECRET_ACCESS_KEY", "DOCFLASH_API_KEYS",
                    "FLOWER_BASIC_AUTH", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN"}
INTERPOLATION = re.compile(r"\$\{(\w+)(?::([?-])([^}]*))?\}")


def interpolate(value: str, environment: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error} against `environment`; KeyError if a required one is
    unset."""
    def replace(match):
        name, kind, rest = match.groups()
        if environment.get(name):
            return environment[name]
        if kind == "-":
            return rest
        raise KeyError(name)
    return INTERPOLATION.sub(replace, str(value))


def test_stack_has_every_part():
    assert set(SERVICES) == {"redis", "s3", "s3-init", "api", "worker", "watch", "flower"}
    assert [SERVICES[s]["build"]["dockerfile"] for s in ("api", "watch", "flower")] == ["docker/api.Dockerfile"] * 3
    assert SERVICES["worker"]["build"]["dockerfile"] == "docker/worker.Dockerfile"
    for service in SERVICES.values():
        if "build" in service:
            assert (REPO / "docker" / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
    assert [SERVICES[s]["command"][0] for s in ("api", "worker", "watch", "flower")] == [
        "api", "worker", "watch", "flower"
    ]


def test_worker_gets_one_gpu_shared_memory_and_time_to_finish():
    worker = SERVICES["worker"]
    [device] = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"] and len(device["device_ids"]) == 1
    assert worker["command"] == ["worker", "--gpu", "0"]
    assert worker["shm_size"].endswith("gb")
    grace = int(worker["stop_grace_period"].removesuffix("s"))
    assert grace > int(worker["environment"]["DOCFLASH_TASK_HARD_TIME_LIMIT"])
    assert worker["healthcheck"]["test"] == ["CMD", "docflash", "ping-worker", "--gpu", "0"]


def test_flower_keeps_its_state_on_the_volume():
    flower = SERVICES["flower"]
    command = flower["command"]
    assert command[:2] == ["flower", "--persistent"]
    volume_path = flower["volumes"][0].split(":")[1]
    assert command[command.index("--db") + 1].startswith(volume_path + "/")


def test_redis_keeps_an_append_only_file():
    command = SERVICES["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"


def test_dependencies_and_volumes_exist():
    for name, service in SERVICES.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in SERVICES, f"{name} depends on unknown {dependency}"
        for volume in service.get("volumes", []):
            assert volume.split(":")[0] in COMPOSE["volumes"], f"{name}: {volume}"
    assert SERVICES["api"]["depends_on"]["s3-init"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("name", sorted(SERVICES), ids=sorted(SERVICES))
def test_secrets_come_from_the_environment_and_are_required(name):
    for variable, value in SERVICES[name].get("environment", {}).items():
        if variable in SECRET_VARIABLES:
            match = INTERPOLATION.fullmatch(str(value))
            assert match, f"{name}: {variable} is not taken from the environment"
            if variable != "HF_TOKEN":
                assert match.group(2) == "?", f"{name}: {variable} must be required (${{VAR:?...}})"


def test_environment_is_accepted_by_the_service_settings():
    given = {"DOCFLASH_S3_ACCESS_KEY_ID": "local-key-id", "DOCFLASH_S3_SECRET_ACCESS_KEY": "local-secret-value",
             "DOCFLASH_API_KEYS": "acme:" + "0f" * 32, "FLOWER_BASIC_AUTH": "admin:pw", "DOCFLASH_LLM_MODEL": "org/m"}
    fields = set(Settings.model_fields)
    for name in ("api", "worker", "watch", "flower"):
        environment = {k: interpolate(v, given) for k, v in SERVICES[name]["environment"].items()}
        docflash = {k.removeprefix("DOCFLASH_").lower(): v for k, v in environment.items() if k.startswith("DOCFLASH_")}
        assert set(docflash) <= fields, name
        settings = Settings(_env_file=None, **docflash)
        assert settings.redis_url == "redis://redis:6379/0" and settings.s3_endpoint_url == "http://s3:8333"


def test_missing_secret_stops_compose():
    with pytest.raises(KeyError, match="DOCFLASH_API_KEYS"):
        interpolate(SERVICES["api"]["environment"]["DOCFLASH_API_KEYS"], {})


def test_env_example_lists_every_variable_compose_requires():
    example = (REPO / "docker" / "compose.env.example").read_text()
    listed = set(re.findall(r"^(\w+)=", example, re.M))
    required = {
        m.group(1) for m in INTERPOLATION.finditer((REPO / "docker" / "compose.yaml").read_text()) if m.group(2) == "?"
    }
    assert required <= listed
