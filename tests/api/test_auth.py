"""API keys: parsing the configured entries and resolving bearer tokens to tenants."""
import hashlib

import pytest

from api.auth import ApiKey, authenticate, hash_api_key, parse_api_keys, tenant_for_token
from api.errors import ApiError

ACME_SECRET = "acme-secret-key-1"
GLOBEX_SECRET = "globex-secret-key-2"
KEYS = [ApiKey("acme", hash_api_key(ACME_SECRET)), ApiKey("globex", hash_api_key(GLOBEX_SECRET))]


def test_hash_is_sha256_hex():
    assert hash_api_key(ACME_SECRET) == hashlib.sha256(ACME_SECRET.encode()).hexdigest()


def test_parse_splits_tenant_and_digest():
    digest = hash_api_key(ACME_SECRET)
    assert parse_api_keys([f"acme:{digest}", f"globex.eu:{digest.upper()}"]) == [
        ApiKey("acme", digest),
        ApiKey("globex.eu", digest),
    ]


@pytest.mark.parametrize(
    "token, tenant",
    [
        pytest.param(ACME_SECRET, "acme", id="acme"),
        pytest.param(GLOBEX_SECRET, "globex", id="globex"),
        pytest.param("acme-secret-key-", None, id="prefix-of-a-key"),
        pytest.param(hash_api_key(ACME_SECRET), None, id="the-digest-itself"),
    ],
)
def test_token_resolves_to_its_tenant_only(token, tenant):
    assert tenant_for_token(token, KEYS) == tenant


def test_valid_bearer_header_gives_tenant():
    assert authenticate(f"Bearer {GLOBEX_SECRET}", KEYS) == "globex"
    assert authenticate(f"bearer {ACME_SECRET}", KEYS) == "acme"


@pytest.mark.parametrize(
    "header, message",
    [
        pytest.param(None, "missing API key", id="missing"),
        pytest.param("", "missing API key", id="empty"),
        pytest.param(f"Basic {ACME_SECRET}", "must be 'Bearer <key>'", id="wrong-scheme"),
        pytest.param("Bearer ", "must be 'Bearer <key>'", id="no-token"),
        pytest.param("Bearer not-a-key", "invalid API key", id="unknown-key"),
    ],
)
def test_bad_header_is_401_with_bearer_challenge(header, message):
    with pytest.raises(ApiError) as caught:
        authenticate(header, KEYS)
    assert caught.value.status_code == 401
    assert message in caught.value.message
    assert caught.value.headers["WWW-Authenticate"].startswith("Bearer")


def test_no_configured_keys_admits_nobody():
    with pytest.raises(ApiError):
        authenticate(f"Bearer {ACME_SECRET}", [])
