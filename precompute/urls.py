"""The URLs of the two dependencies, as settings hold them: the usual PostgreSQL spelling mapped to psycopg 3,
credentials that drivers would read differently refused, passwords masked for display."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from .errors import ConfigError


def normalize_database_url(url: str) -> str:
    """Accept the usual ``postgresql://`` spelling and use psycopg 3 for it."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def check_url(env: str, url: str | None) -> None:
    """Refuse a URL that drivers would read differently from what it says: an unencoded ``@ / ? #`` in the user
    name or password moves the rest of the password into the host, port or path, where drivers echo it in their
    errors ("failed to resolve host 'RET@db'", "Port could not be cast ... as 'S3CRET'"). The message never
    repeats the URL."""
    scheme, sep, rest = (url or "").partition("://")
    if not sep or scheme.startswith("sqlite") or scheme == "unix":
        return
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if rest.count("@") > 1 or rest.count("@") != authority.count("@"):
        raise ConfigError(f"{env} cannot be read: an '@', '/', '?' or '#' in its user name or password must be "
                          "percent-encoded (%40, %2F, %3F, %23)")
    try:
        cluster_nodes(url) if scheme.endswith("+cluster") else urlsplit(url).port
    except ValueError:
        raise ConfigError(f"{env} cannot be read: its port is not a number") from None


def cluster_nodes(url: str) -> list[tuple[str, int]]:
    """The ``host:port`` nodes a cluster URL names, comma-separated (``redis+cluster://a:7000,b:7001``); a node
    without host or port means 127.0.0.1 / 6379. ``ValueError`` for a port that is not a number."""
    netloc = re.split(r"[/?#]", url.partition("://")[2], maxsplit=1)[0]
    nodes = []
    for hostport in netloc.rpartition("@")[2].split(","):
        split = urlsplit(f"redis://{hostport}")
        nodes.append((split.hostname or "127.0.0.1", split.port or 6379))
    return nodes


#: Query parameters that carry a secret in the URLs drivers accept (libpq's ``password``, ``sslpassword``; redis-py's
#: ``password``), matched without regard to case.
_SECRET_PARAMS = re.compile(r"([?&;](?:ssl)?pass(?:word)?=)[^&;#]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***``: the one in ``user:password@`` and any ``password=`` (or
    ``sslpassword=``) query parameter."""
    url = _SECRET_PARAMS.sub(r"\1***", url)
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"
