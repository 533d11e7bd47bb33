"""Fixtures of the in-process apiserver tests (defined in `apiserver_fixtures`)."""

from apiserver_fixtures import api, etcd_api

__all__ = ["api", "etcd_api"]
