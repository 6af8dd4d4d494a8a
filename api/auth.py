"""API keys as bearer tokens, stored only as sha256 hashes, each bound to one tenant."""
import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from api.errors import ApiError

_CHALLENGE = {"WWW-Authenticate": "Bearer"}
_INVALID_TOKEN = {"WWW-Authenticate": 'Bearer error="invalid_token"'}


@dataclass(frozen=True)
class ApiKey:
    """One configured key: the tenant it acts for and the sha256 hex digest of the secret."""

    tenant: str
    digest: str


def hash_api_key(secret: str) -> str:
    """Return the sha256 hex digest under which an API key is configured."""
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_api_keys(entries: Iterable[str]) -> list[ApiKey]:
    """Turn the `tenant:sha256hex` entries of the `api_keys` setting (validated there) into ApiKeys."""
    keys = []
    for entry in entries:
        tenant, _, digest = entry.rpartition(":")
        keys.append(ApiKey(tenant, digest.lower()))
    return keys


def tenant_for_token(token: str, keys: Iterable[ApiKey]) -> str | None:
    """Return the tenant whose key hashes to `token`'s digest, or None.

    Every configured digest is compared in constant time, so timing does not reveal how close a guess was
    or which entry matched.
    """
    digest = hash_api_key(token).encode()
    tenant = None
    for key in keys:
        if hmac.compare_digest(digest, key.digest.encode()):
            tenant = key.tenant
    return tenant


def authenticate(authorization: str | None, keys: Iterable[ApiKey]) -> str:
    """Return the tenant of an `Authorization: Bearer <key>` header; raise a 401 ApiError otherwise."""
    if not authorization:
        raise ApiError(401, "unauthorized", "missing API key: send 'Authorization: Bearer <key>'", headers=_CHALLENGE)
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ApiError(
            401, "unauthorized", "the Authorization header must be 'Bearer <key>'", headers=_CHALLENGE
        )
    tenant = tenant_for_token(token, keys)
    if tenant is None:
        raise ApiError(401, "unauthorized", "invalid API key", headers=_INVALID_TOKEN)
    return tenant
