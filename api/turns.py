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

Turns are shared fairly among clients (``Clients``): a client is the key a request presents when this process
already knows it as an active key (from memory, before any check), else the client's address as the per-address
limits read it. A made-up ``Authorization`` header, one changed at every request included, is then its address's:
a flood cannot get a queue per request. Requests wait in a queue per client, and a free turn goes to the clients in
rounds, one request each: one client cannot fill the queue in front of the others. A key sending 30 requests at
once waits behind its own; a key sending one request now and then waits for the requests under way and at most one
of each other waiting client. Within a client, arrival order.
"""

from __future__ import annotations

import io
import threading
from collections import deque
from collections.abc import Callable

from .addresses import Network, client_address
from .auth import PRESENTED, basic_password
from .keyring import Keyring

#: The environ key that says the request's body was read whole off the connection (``errors.body_left_unread``).
READ = "prefeed.body_read"
#: Paths served without a turn: cheap, and needed most when the process is busiest.
UNQUEUED = frozenset({"/livez", "/healthz", "/metrics"})


class Turns:
    """WSGI middleware: ``concurrency`` requests of ``wsgi_app`` at a time, the waiting ones served in rounds over
    their clients (one each, in order of arrival within a client), each request's body read first (at most
    ``body_max`` bytes). ``client`` names a request's client from its environ (``Clients``; by default its
    connection's address)."""

    def __init__(self, wsgi_app, concurrency: int, body_max: int,
                 client: Callable[[dict], str] = lambda environ: environ.get("REMOTE_ADDR") or "") -> None:
        self.wsgi_app, self.body_max, self.client = wsgi_app, body_max, client
        self._lock = threading.Lock()
        self._free = concurrency
        #: The clients with requests waiting, in the order of the round (a dict keeps insertion order); a client
        #: is here only while it has a request waiting, so the dict is bounded by the server's threads.
        self._waiting: dict[str, deque[threading.Event]] = {}

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") in UNQUEUED:
            return self.wsgi_app(environ, start_response)
        self._read_body(environ)
        self._take(self.client(environ))
        try:
            # The answer is made within the turn: an iterable still to be run would run after it. Closed as WSGI
            # asks (a response's close hooks, an open file), since the server gets the list, not the iterable.
            answer = self.wsgi_app(environ, start_response)
            try:
                return list(answer)
            finally:
                close = getattr(answer, "close", None)
                if callable(close):
                    close()
        finally:
            self._give()

    def waiting(self) -> int:
        """How many requests wait for a turn now."""
        with self._lock:
            return sum(len(queue) for queue in self._waiting.values())

    def _take(self, who: str) -> None:
        """Wait for a turn: at once when one is free (then nobody waits), else behind ``who``'s earlier requests."""
        with self._lock:
            if self._free:
                self._free -= 1
                return
            woken = threading.Event()
            self._waiting.setdefault(who, deque()).append(woken)
        woken.wait()

    def _give(self) -> None:
        """Hand the turn to the oldest request of the first client in the round, which then goes to the round's
        end if it has more waiting; free it when nobody waits."""
        with self._lock:
            if not self._waiting:
                self._free += 1
                return
            who = next(iter(self._waiting))
            queue = self._waiting.pop(who)
            woken = queue.popleft()
            if queue:
                self._waiting[who] = queue
            woken.set()

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


class Clients:
    """Whose request this is, for sharing turns: ``key <name>`` when the request presents a key (bearer, or the
    password of basic auth) that ``keyring`` knows as active (``Keyring.known``: memory only), else ``address
    <address>``, the client's address as ``addresses.client_address`` reads it past the ``trusted`` proxies."""

    def __init__(self, keyring: Keyring, trusted: tuple[Network, ...]) -> None:
        self.keyring, self.trusted = keyring, trusted

    def __call__(self, environ: dict) -> str:
        presented = credential(environ.get("HTTP_AUTHORIZATION", ""))
        if presented:
            digest = self.keyring.digest_of(presented)
            key = self.keyring.known(presented) if digest is None else self.keyring.known_by(digest)
            if digest is not None:
                environ[PRESENTED] = (presented, digest)     # the key check takes it rather than hash it again
            if key is not None:
                return f"key {key.name}"
        return f"address {client_address(environ, self.trusted)}"


def credential(authorization: str) -> str:
    """The key an ``Authorization`` value presents: a bearer token, or a basic-auth password; "" for anything
    else (``auth.py`` decides what to answer it)."""
    scheme, _, given = authorization.strip().partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        return given.strip()
    if scheme == "basic":
        return (basic_password(given) or "").strip()
    return ""
