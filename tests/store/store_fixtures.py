"""Names shared by the store tests and their conftest: `StoreFactory`, the type of the
`make_store` fixture. A module of its own, because `from conftest import ...` resolves to
whichever conftest module pytest imported first when several test directories are
collected together."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ephemera.store import Store

StoreFactory = Callable[..., Awaitable[Store]]
