"""Turns: at most ``PREFEED_API_CONCURRENCY`` requests run in one API process at once; the others wait, in order of
arrival, for a turn.

Why: an API process runs its requests in threads (``manage.py serve``: 64 per process, so that slow clients hold
threads rather than the process), and Python runs one thread at a time. When far more requests are under way than
the process can serve (a client flooding ``POST /events`` past its budget: each refusal still costs its parse and
look-ups), every request waits for the interpreter again at each of its database and Redis calls, behind every
other thread: a page or an event of a real user took seconds while each of them alone takes milliseconds. Waiting
once for a turn instead, a request then runs with a handful of others, and what a flood costs the rest is the
queue in front of them, in order.

A request's body is read before it waits (up to ``PREFEED_REQUEST_BODY_MAX``; a larger one is left for the app to
refuse unread, as before), so a client that sends its body slowly holds a thread, never a turn. ``/livez``,
``/healthz`` and ``/metrics`` never wait: an overloaded process still answers its probes and its scrapes.
"""

from __future__ import annotations

import io
import threading

#: The environ key that says the request's body was read whole off the connection (``errors.body_left_unread``).
READ = "prefeed.body_read"
#: Paths served without a turn: cheap, and needed most when the process is busiest.
UNQUEUED = frozenset({"/livez", "/healthz", "/metrics"})


class Turns:
    """WSGI middleware: ``concurrency`` requests of ``wsgi_app`` at a time, in order of arrival (a semaphore's
    waiters are woken oldest first), each request's body read first (at most ``body_max`` bytes)."""

    def __init__(self, wsgi_app, concurrency: int, body_max: int) -> None:
        self.wsgi_app, self.body_max = wsgi_app, body_max
        self._turns = threading.Semaphore(concurrency)

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") in UNQUEUED:
            return self.wsgi_app(environ, start_response)
        self._read_body(environ)
        with self._turns:
            # The answer is made within the turn: an iterable still to be run would run after it. Closed as WSGI
            # asks (a response's close hooks, an open file), since the server gets the list, not the iterable.
            answer = self.wsgi_app(environ, start_response)
            try:
                return list(answer)
            finally:
                close = getattr(answer, "close", None)
                if callable(close):
                    close()

    def _read_body(self, environ) -> None:
        """Read the request's body into memory, when it is not over the limit (the app refuses that one unread)."""
        stream = environ.get("wsgi.input")
        if stream is None:
            return
        length = environ.get("CONTENT_LENGTH") or ""
        if length.isdigit():
            if not 0 < int(length) <= self.body_max:
                return
            environ["wsgi.input"] = io.BytesIO(stream.read(int(length)))
            environ[READ] = True
        elif "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
            # One byte past the limit, so that the app still sees a body over it and refuses it.
            data = stream.read(self.body_max + 1)
            environ["wsgi.input"] = io.BytesIO(data)
            environ[READ] = len(data) <= self.body_max
