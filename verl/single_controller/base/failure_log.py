"""Remember the first error a worker process logged, so the driver can quote it after the process dies.

A dead process cannot answer questions, so the first error is pushed out (to a sink installed by the backend,
e.g. Ray's GCS key-value store) the moment it happens. Only the first one is kept: later errors are usually
consequences of it.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Callable

MAX_RECORD_CHARS = 8000

_lock = threading.Lock()
_state: dict = {"sink": None, "recorded": False, "in_sink": False, "hooks": False}


def set_failure_sink(sink: Callable[[str], None] | None) -> None:
    """Install where the first error goes (``sink(text)``); None turns recording off."""
    with _lock:
        _state["sink"] = sink
        _state["recorded"] = False


def record_failure_text(text: str) -> bool:
    """Send ``text`` to the sink if it is the process's first recorded error; True when it was sent."""
    with _lock:
        sink = _state["sink"]
        if sink is None or _state["recorded"] or _state["in_sink"]:
            return False
        _state["recorded"] = True
        _state["in_sink"] = True
    try:
        sink(text[-MAX_RECORD_CHARS:])
        return True
    except Exception:  # the sink must never turn a worker error into a different one
        return False
    finally:
        with _lock:
            _state["in_sink"] = False


def record_current_exception() -> bool:
    """Record the exception being handled (call from an ``except`` block)."""
    exc_type, exc, tb = sys.exc_info()
    if exc is None:
        return False
    return record_failure_text("".join(traceback.format_exception(exc_type, exc, tb)))


class _FirstErrorHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)

    def emit(self, record: logging.LogRecord) -> None:
        text = f"{record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            text += "\n" + "".join(traceback.format_exception(*record.exc_info))
        record_failure_text(text)


def install_process_hooks() -> None:
    """Catch errors logged at ERROR level and uncaught exceptions in any thread (idempotent)."""
    with _lock:
        if _state["hooks"]:
            return
        _state["hooks"] = True
    logging.getLogger().addHandler(_FirstErrorHandler())

    previous_excepthook = sys.excepthook

    def excepthook(exc_type, exc, tb):
        record_failure_text("".join(traceback.format_exception(exc_type, exc, tb)))
        previous_excepthook(exc_type, exc, tb)

    sys.excepthook = excepthook

    previous_thread_hook = threading.excepthook

    def thread_hook(args):
        if args.exc_type is not SystemExit:
            text = "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
            record_failure_text(f"uncaught in thread {getattr(args.thread, 'name', '?')}:\n{text}")
        previous_thread_hook(args)

    threading.excepthook = thread_hook
