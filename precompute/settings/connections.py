"""Where prefeed's state lives, and the URLs that reach it.

The settings that say where: the database (its URL and each process's pool), the Redis servers (feeds and the
queue, together or apart), the bundle and data directories, the names prefeed writes under, and the admin token of
deployments from before API keys. Then the URLs as settings hold them: the usual PostgreSQL spelling mapped to
psycopg 3, credentials that drivers would read differently refused, passwords masked for display.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import ConfigError
from .environment import setting


@dataclasses.dataclass(frozen=True)
class ConnectionSettings:
    # -- where things live ---------------------------------------------------------------------------------
    database_url: str = setting("", "DATABASE_URL", "SQLAlchemy URL; `postgresql://…` uses psycopg 3",
                                shown="`sqlite:///<PREFEED_VAR_DIR>/prefeed.db`")
    db_pool_size: int = setting(2, "PREFEED_DB_POOL_SIZE", "PostgreSQL connections each process keeps open for "
                                "reuse, opened as it needs them (SQLAlchemy `pool_size`); a prefeed process uses "
                                "one at a time (see \"Database connections\")", unit="connections")
    db_max_overflow: int = setting(2, "PREFEED_DB_MAX_OVERFLOW", "connections a process may open beyond those, "
                                   "closed as they are returned: a process never holds more than the two together",
                                   unit="connections", minimum=0)
    db_pool_timeout: int = setting(10, "PREFEED_DB_POOL_TIMEOUT", "a process holding the most it may waits this "
                                   "long for one to be returned, then fails as database unavailable (below "
                                   "gunicorn's 30 s worker timeout: the API answers 503)", unit="s")
    db_prepared_statements: bool = setting(False, "PREFEED_DB_PREPARED_STATEMENTS", "`true`: psycopg prepares a "
                                           "statement on the server after its fifth execution on a connection; "
                                           "only for a direct connection, or PgBouncer 1.21+ with "
                                           "`max_prepared_statements` set (older PgBouncer in transaction mode "
                                           "runs the next transaction on a server connection that lacks it)")
    redis_url: str | None = setting(None, "REDIS_URL", "feeds, item states and the RQ queue; unset: the CLI starts "
                                    "the embedded Valkey under `var/valkey` (loopback only, a random password kept "
                                    "in its owner-only `valkey.conf`)")
    queue_redis_url: str | None = setting(None, "QUEUE_REDIS_URL", "the RQ queue, the dirty-user set and the drain "
                                          "flags: one Redis (RQ does not run on a cluster); unset: `REDIS_URL`")
    feed_redis_url: str | None = setting(None, "FEED_REDIS_URL", "feeds, seen items, boosts, deactivations and the "
                                         "fallback's popular lists; `redis+cluster://host:port[,host:port…]` selects "
                                         "Redis Cluster; unset: `REDIS_URL`")
    model_dir: Path = setting(Path(""), "MODEL_DIR", "model bundles and the `CURRENT` pointer",
                              shown="`<PREFEED_VAR_DIR>/models`")
    admin_token: str | None = setting(None, "PREFEED_ADMIN_TOKEN", "a key with the `admin` scope (every route), for "
                                      "deployments from before `manage.py keys`; unset: none", secret=True)
    var_dir: Path = setting(Path("var"), "PREFEED_VAR_DIR", "SQLite, model bundles and the embedded server's files "
                            "when nothing else is configured")
    key_prefix: str = setting("prefeed:", "PREFEED_KEY_PREFIX", "prefix of every Redis key prefeed writes")
    queue_name: str = setting("prefeed", "PREFEED_QUEUE", "RQ queue name")


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
