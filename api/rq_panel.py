"""rq-dashboard (0.9) mounted at ``/dashboard/rq`` behind the dashboard's auth, on the queue Redis, reading jobs
with RQ's JSON serializer (prefeed's payloads: ``jobs.queues``).

rq-dashboard 0.9 keeps its serializer in a module-level object (``rq_dashboard.web.config``), so it is set for the
whole process; prefeed writes no job with another serializer. Its connection comes from ``RQ_DASHBOARD_REDIS_URL``
(``setup_rq_connection``); the URL it shows in its pages has the password masked by rq-dashboard itself.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from flask import Flask, request
from rq.exceptions import NoSuchJobError

from precompute.errors import Forbidden, InvalidInput, NotFound
from precompute.settings import Settings

from .addresses import forwarded_proto, guard
from .auth import check_dashboard
from .errors import error, prefeed_response

PREFIX = "/dashboard/rq"
log = logging.getLogger(__name__)


def mount(app: Flask, settings: Settings) -> None:
    import rq_dashboard
    from rq.serializers import JSONSerializer
    from rq_dashboard.web import config, setup_rq_connection

    config.serializer = JSONSerializer
    app.config["RQ_DASHBOARD_REDIS_URL"] = settings.queue_url
    setup_rq_connection(app)
    app.register_blueprint(rq_dashboard.blueprint, url_prefix=PREFIX)
    app.before_request(_guard)

    @app.errorhandler(NoSuchJobError)
    def _no_job(exc):
        return prefeed_response(NotFound("no such job"))

    # rq-dashboard reads page numbers and instance indexes with int() and list indexing: a bad one is a 400 there,
    # and stays a bug (500, logged) anywhere else.
    @app.errorhandler(ValueError)
    @app.errorhandler(LookupError)
    def _bad_value(exc):
        if request.blueprint == "rq_dashboard":
            return prefeed_response(InvalidInput("bad value in the RQ dashboard's path"))
        log.exception("unhandled error")
        return error(500, "internal error")


def same_origin(origin: str, host_url: str) -> bool:
    """``origin`` (an ``Origin`` or ``Referer`` value) has exactly the scheme, host and port of ``host_url``: a
    prefix match would let ``http://host:port.evil.example`` through."""
    try:
        a, b = urlsplit(origin), urlsplit(host_url)
        return bool(a.scheme) and (a.scheme, a.hostname, a.port or _PORTS.get(a.scheme)) == \
            (b.scheme, b.hostname, b.port or _PORTS.get(b.scheme))
    except ValueError:                  # a malformed port
        return False


_PORTS = {"http": 80, "https": 443}


def _guard() -> None:
    """Before every rq-dashboard view (and before its own hooks): the admin token; one Redis instance (0); and
    state changes (delete, requeue, empty) only from the dashboard's own pages, since a browser re-sends basic-auth
    credentials with a form another site posts."""
    if request.blueprint != "rq_dashboard":
        return
    check_dashboard()
    if (request.view_args or {}).get("instance_number", 0) != 0:
        raise NotFound("this dashboard shows one RQ instance: 0")
    if request.method not in ("GET", "HEAD") or request.endpoint == "rq_dashboard.requeue_all":   # GET requeues too
        origin = request.headers.get("Origin") or request.headers.get("Referer") or ""
        # behind the shipped nginx: Host carries the port the browser used ($http_host), and a TLS-ending proxy
        # that is trusted (PREFEED_TRUSTED_PROXIES) says the scheme the browser used
        proto = forwarded_proto(request.environ, guard().trusted)
        if not same_origin(origin, f"{proto}://{request.host}/" if proto else request.host_url):
            raise Forbidden("state changes are accepted only from the dashboard's own pages")
