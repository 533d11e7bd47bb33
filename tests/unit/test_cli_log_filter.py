"""`ClosedTlsWriteFilter`: uvloop's `Fatal error on SSL protocol` for a write after the peer
closed (a RuntimeError, `the handler is closed`) leaves no traceback in a component's log;
every other asyncio record passes as it is."""

from __future__ import annotations

import logging
import sys

from ephemera.cli.main import ClosedTlsWriteFilter


def record(message: str, error: BaseException | None) -> logging.LogRecord:
    exc_info = None
    if error is not None:
        try:
            raise error
        except BaseException:
            exc_info = sys.exc_info()
    return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, message, (), exc_info)


CLOSED = RuntimeError("unable to perform operation on <TCPTransport closed=True reading=False "
                      "0x5582a47eb860>; the handler is closed")


def test_the_closed_transport_race_is_dropped_or_one_debug_line() -> None:
    root = logging.getLogger()
    level = root.level
    try:
        root.setLevel(logging.INFO)
        assert ClosedTlsWriteFilter().filter(record("Fatal error on SSL protocol", CLOSED)) \
            is False
        root.setLevel(logging.DEBUG)
        verbose = record("Fatal error on SSL protocol", CLOSED)
        assert ClosedTlsWriteFilter().filter(verbose) is True
        assert (verbose.levelname, verbose.exc_info, verbose.getMessage()) == (
            "DEBUG", None, "a TLS write after the connection closed (uvloop); dropped")
    finally:
        root.setLevel(level)


def test_other_asyncio_errors_pass_unchanged() -> None:
    other = record("Fatal error on SSL protocol", ValueError("bad record mac"))
    assert ClosedTlsWriteFilter().filter(other) is True and other.levelno == logging.ERROR
    assert other.exc_info is not None
    unrelated = record("Task exception was never retrieved", CLOSED)
    assert ClosedTlsWriteFilter().filter(unrelated) is True and unrelated.exc_info is not None
