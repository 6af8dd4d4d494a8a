"""Settings: environment parsing and the start-up checks whose errors name the variable."""
from __future__ import annotations

import hashlib

import pytest

from core.settings import SettingsError, load_settings

KEY_HASH = hashlib.sha256(b"key-one").hexdigest()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("DOCFLASH_"):
            monkeypatch.delenv(name)


def test_defaults_are_valid_and_point_at_the_bundled_encoder() -> None:
    settings = load_settings(_env_file=None)
    assert settings.env == "development"
    assert settings.output_uri == "s3://docflash/jobs"
    assert settings.embed_model_path.endswith("model")
    assert settings.task_soft_time_limit < settings.task_hard_time_limit < settings.broker_visibility_timeout
    assert settings.json_logs is False


def test_environment_variables_are_read_with_the_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCFLASH_ENV", "production")
    monkeypatch.setenv("DOCFLASH_REDIS_URL", "redis://redis:6379/3")
    monkeypatch.setenv("DOCFLASH_GPU_QUEUE", "gpu.h200")
    monkeypatch.setenv("DOCFLASH_S3_SECRET_ACCESS_KEY", "s3cr3t-Value-9")
    monkeypatch.setenv("DOCFLASH_LOG_LEVEL", "debug")
    settings = load_settings(_env_file=None)
    assert settings.log_level == "DEBUG"
    assert (settings.env, settings.redis_url, settings.gpu_queue) == ("production", "redis://redis:6379/3", "gpu.h200")
    assert settings.s3_secret_access_key.get_secret_value() == "s3cr3t-Value-9"
    assert "s3cr3t" not in repr(settings)
    assert settings.json_logs is True


@pytest.mark.parametrize(
    "value",
    [f"acme:{KEY_HASH},beta:{KEY_HASH}", f'["acme:{KEY_HASH}", "beta:{KEY_HASH}"]'],
    ids=["comma-list", "json-list"],
)
def test_api_keys_accept_a_comma_list_or_json(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("DOCFLASH_API_KEYS", value)
    assert load_settings(_env_file=None).api_keys == [f"acme:{KEY_HASH}", f"beta:{KEY_HASH}"]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"DOCFLASH_TASK_SOFT_TIME_LIMIT": "600", "DOCFLASH_TASK_HARD_TIME_LIMIT": "600"},
         "DOCFLASH_TASK_SOFT_TIME_LIMIT"),
        ({"DOCFLASH_TASK_HARD_TIME_LIMIT": "5000", "DOCFLASH_BROKER_VISIBILITY_TIMEOUT": "4000"},
         "DOCFLASH_BROKER_VISIBILITY_TIMEOUT"),
        ({"DOCFLASH_ENV": "production", "DOCFLASH_S3_SECRET_ACCESS_KEY": "changeme"}, "DOCFLASH_S3_SECRET_ACCESS_KEY"),
        ({"DOCFLASH_ENV": "production", "DOCFLASH_S3_ACCESS_KEY_ID": ""}, "DOCFLASH_S3_ACCESS_KEY_ID"),
        ({"DOCFLASH_API_KEYS": "acme:not-a-hash"}, "DOCFLASH_API_KEYS"),
        ({"DOCFLASH_OUTPUT_URI": "/tmp/out"}, "DOCFLASH_OUTPUT_URI"),
        ({"DOCFLASH_ATTENTION_IMPL": "flash2"}, "DOCFLASH_ATTENTION_IMPL"),
        ({"DOCFLASH_ENV": "staging"}, "DOCFLASH_ENV"),
        ({"DOCFLASH_PACK_TOKEN_BUDGET": "0"}, "DOCFLASH_PACK_TOKEN_BUDGET"),
    ],
    ids=["soft-not-below-hard", "visibility-not-above-hard", "placeholder-secret", "empty-key-id",
         "api-key-not-hashed", "output-not-s3", "unknown-attention", "unknown-env", "zero-budget"],
)
def test_bad_settings_fail_at_start_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=named):
        load_settings(_env_file=None)


def test_placeholder_secrets_are_allowed_in_development(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCFLASH_S3_SECRET_ACCESS_KEY", "changeme")
    assert load_settings(_env_file=None).s3_secret_access_key.get_secret_value() == "changeme"


def test_dotenv_file_is_read(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("DOCFLASH_WATCH_URI=s3://drop/incoming/\nDOCFLASH_WATCH_INTERVAL_S=2.5\n")
    monkeypatch.chdir(tmp_path)
    settings = load_settings()
    assert (settings.watch_uri, settings.watch_interval_s) == ("s3://drop/incoming/", 2.5)
