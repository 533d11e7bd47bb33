"""`EndpointPicker`: which apiserver a client talks to when it knows several, as k3s' agent
load balancer picks one.

The picker holds the apiserver base URLs in order of preference (`--apiserver-endpoints`, then
the kubeconfig's server, then those learned from the apiserver identity leases; see
`ephemera.client.apiservers`). It is sticky: every request goes to the current server while it
answers. When a connection to it cannot be made (refused, unreachable, the connect timed out)
the client marks it failed and the picker moves to the next server not marked failed (failed
ones are tried last, oldest failure first); any answer from a server clears its mark. So a
client moves to a healthy apiserver as soon as its own stops answering, without waiting for a
back-off, and stays there.

It holds no connections and does no I/O: `ephemera.client.api.ApiClient` asks it for
`current()` and reports `failed(url)` and `succeeded(url)`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence

__all__ = ["EndpointPicker", "normalize_url"]

log = logging.getLogger("ephemera.client.endpoints")


def normalize_url(url: str) -> str:
    """A base URL without its trailing slash (the form every URL is compared in)."""
    return url.strip().rstrip("/")


class EndpointPicker:
    """An ordered, de-duplicated list of apiserver base URLs and the current one."""

    def __init__(self, urls: Iterable[str]) -> None:
        self._urls: list[str] = []
        self._failed: dict[str, float] = {}
        self.add(urls)
        if not self._urls:
            raise ValueError("no apiserver URL")
        self._current = self._urls[0]

    @property
    def urls(self) -> Sequence[str]:
        """Every known URL, in order of preference."""
        return tuple(self._urls)

    def add(self, urls: Iterable[str]) -> list[str]:
        """Learn more URLs (kept after the known ones); those that were new."""
        added: list[str] = []
        for url in urls:
            url = normalize_url(url)
            if url and url not in self._urls:
                self._urls.append(url)
                added.append(url)
        return added

    def current(self) -> str:
        return self._current

    def candidates(self) -> list[str]:
        """The order to try servers in for one request: the current one, then the others
        not marked failed (in order of preference), then the failed ones, oldest failure
        first."""
        rest = [u for u in self._urls if u != self._current]
        healthy = [u for u in rest if u not in self._failed]
        failed = sorted((u for u in rest if u in self._failed), key=self._failed.__getitem__)
        return [self._current, *healthy, *failed]

    def failed(self, url: str, reason: object = "") -> None:
        """A connection to `url` could not be made (`reason`): mark it, and when it is the
        current one, move to the next candidate."""
        url = normalize_url(url)
        self._failed[url] = time.monotonic()
        if url == self._current and len(self._urls) > 1:
            following = self.candidates()[1]
            log.warning("apiserver %s is not answering (%s); switching to %s", url,
                        reason or "no connection", following)
            self._current = following

    def succeeded(self, url: str) -> None:
        """`url` answered: clear its mark, and stick to it if the current one has failed
        (a late answer from a server left behind does not pull the client back to it)."""
        url = normalize_url(url)
        self._failed.pop(url, None)
        if url != self._current and url in self._urls and self._current in self._failed:
            self._current = url
