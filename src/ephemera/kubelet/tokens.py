"""The kubelet's service account token manager, as upstream's `pkg/kubelet/token`: tokens for
projected `serviceAccountToken` volumes, asked of the apiserver with a TokenRequest
(`serviceaccounts/NAME/token`) and cached.

A cached token is reused until it needs a refresh: when 80% of its lifetime has passed, or
24 hours after it was issued, each less a random jitter of up to 10 seconds (upstream's
`requiresRefresh`). When a refresh fails, the cached token is used while it is still valid.
`forget_pod(uid)` drops the tokens bound to a pod; expired ones are dropped on every call.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
from collections.abc import Callable
from typing import Any

from ephemera.api.errors import StatusError
from ephemera.api.meta import parse_rfc3339
from ephemera.client import ApiClient, ApiUnavailable, resource_path

log = logging.getLogger("ephemera.kubelet.tokens")

MAX_TTL = dt.timedelta(hours=24)
MAX_JITTER_SECONDS = 10.0
REFRESH_FRACTION = 0.2  # refresh when less than this fraction of the lifetime is left

TokenRequest = dict[str, Any]


def _key(namespace: str, name: str, request: TokenRequest) -> str:
    spec = request.get("spec") or {}
    return json.dumps([name, namespace, spec.get("audiences") or [],
                       spec.get("expirationSeconds"), spec.get("boundObjectRef")],
                      sort_keys=True)


def _expires(request: TokenRequest) -> dt.datetime:
    return parse_rfc3339(str((request.get("status") or {}).get("expirationTimestamp")))


def requires_refresh(request: TokenRequest, now: dt.datetime, jitter: float = 0.0) -> bool:
    """Upstream's rule: past `iat + 24h - jitter`, or within 20% of the lifetime plus the
    jitter of `exp`."""
    seconds = (request.get("spec") or {}).get("expirationSeconds")
    if not seconds:
        return False
    exp = _expires(request)
    iat = exp - dt.timedelta(seconds=int(seconds))
    slack = dt.timedelta(seconds=jitter)
    if now > iat + MAX_TTL - slack:
        return True
    return now > exp - dt.timedelta(seconds=int(seconds) * REFRESH_FRACTION) - slack


class TokenManager:
    """The service account tokens of one kubelet's pods (see the module docstring): one
    cached TokenRequest per service account, audience, lifetime and bound pod, refreshed by
    `requires_refresh`; `clock` and `jitter` are there for tests."""

    def __init__(self, api: ApiClient, *,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
                 jitter: Callable[[], float] = lambda: random.random() * MAX_JITTER_SECONDS
                 ) -> None:
        self.api = api
        self.clock = clock
        self.jitter = jitter
        self._cache: dict[str, TokenRequest] = {}

    async def get_service_account_token(self, namespace: str, name: str,
                                        request: TokenRequest) -> TokenRequest:
        """The TokenRequest (with `status.token`) for service account `namespace/name`, from
        the cache or the apiserver."""
        now = self.clock()
        self._drop_expired(now)
        key = _key(namespace, name, request)
        cached = self._cache.get(key)
        if cached is not None and not requires_refresh(cached, now, self.jitter()):
            return cached
        try:
            fresh = await self.api.create(
                resource_path("serviceaccounts", namespace, name, "token"),
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", **request})
        except (StatusError, ApiUnavailable) as err:
            message = getattr(err, "message", None) or str(err)
            if cached is None:
                raise StatusError(getattr(err, "code", 500) or 500, "InternalError",
                                  f"failed to fetch token: {message}") from None
            if now > _expires(cached):
                raise StatusError(500, "InternalError",
                                  f"token {namespace}/{name} expired and refresh failed: "
                                  f"{message}") from None
            log.warning("couldn't update token %s/%s: %s", namespace, name, message)
            return cached
        self._cache[key] = fresh
        return fresh

    def _drop_expired(self, now: dt.datetime) -> None:
        for key in [k for k, v in self._cache.items() if now > _expires(v)]:
            del self._cache[key]

    def forget_pod(self, uid: str) -> None:
        """Drop the tokens bound to pod `uid` (the pod is gone from this node)."""
        for key in [k for k, v in self._cache.items()
                    if ((v.get("spec") or {}).get("boundObjectRef") or {}).get("uid") == uid]:
            del self._cache[key]
