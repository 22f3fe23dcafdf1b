"""Work computed ahead in a forked child process, while the caller does something else on another core.

Training walks its periods one after the other: each period's fit (item table, co-visitation, kNN, latent factors,
the replayed steps) takes no random numbers and shares nothing, so the next one is computed in a child while the
parent builds the current one's examples (which draw from the training's random generator, in order). The child
inherits the parent's memory (the event log) copy-on-write; only its result comes back, pickled through a pipe.

Where a fork cannot be had (no ``fork`` start method, an in-memory SQLite database a child could not read, or a
daemonic process, which may not have children) the work runs in the caller when its result is asked for: the same
results, one after the other.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

from ..errors import ChildLost


class Ahead:
    """``fn()`` started now; ``result()`` waits for it. ``close()`` (or the ``with`` block's end) stops a child whose
    result is no longer wanted."""

    def __init__(self, fn: Callable[[], Any], engine: Engine) -> None:
        self._fn = fn
        self._proc = None
        if not _can_fork(engine):
            return
        ctx = multiprocessing.get_context("fork")
        self._recv, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_child, args=(fn, engine, send), daemon=True)
        self._proc.start()
        send.close()

    def result(self) -> Any:
        if self._proc is None:
            return self._fn()
        try:
            ok, value = self._recv.recv()
        except EOFError:
            self._proc.join()
            raise ChildLost(f"the process computing ahead (a training period's fit) exited with code "
                            f"{self._proc.exitcode} before its result (out of memory?)") from None
        finally:
            self._recv.close()
        self._proc.join()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join()

    def __enter__(self) -> Ahead:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _can_fork(engine: Engine) -> bool:
    url = engine.url
    in_memory = url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")
    # A daemonic process (multiprocessing's) may not start children of its own.
    return ("fork" in multiprocessing.get_all_start_methods() and not in_memory
            and not multiprocessing.current_process().daemon)


def _child(fn: Callable[[], Any], engine: Engine, send) -> None:
    # The parent's pooled connections stay the parent's: the child opens its own (SQLAlchemy's advice for a fork).
    engine.dispose(close=False)
    try:
        out = (True, fn())
    except BaseException as exc:               # noqa: BLE001 - re-raised in the parent
        out = (False, exc)
    try:
        send.send(out)
    except Exception as exc:                   # an exception that does not pickle: its text still reaches the parent
        send.send((False, ChildLost(f"the work computed ahead failed: {out[1]!r} ({exc})")))
    send.close()
