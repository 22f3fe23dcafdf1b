"""One exception base with a small tree. ``api.errors`` and ``cli`` map each class to an HTTP status / exit code.

    PrefeedError
    ├── ConfigError            bad settings or arguments                 → 400 / exit 2
    ├── InvalidInput           a request or argument that cannot be used → 400 / exit 2
    │   └── NotFound           a referenced user or item does not exist  → 404
    ├── Unauthorized           missing or wrong admin token              → 401
    ├── BundleError            model bundle missing, truncated or incompatible → 503 / exit 3
    └── Unavailable            Redis or the database cannot be reached   → 503 / exit 4
"""


class PrefeedError(Exception):
    """Base of every error prefeed raises on purpose."""

    http_status = 500
    exit_code = 1


class ConfigError(PrefeedError):
    http_status = 400
    exit_code = 2


class InvalidInput(PrefeedError):
    http_status = 400
    exit_code = 2


class NotFound(InvalidInput):
    http_status = 404


class Unauthorized(PrefeedError):
    http_status = 401
    exit_code = 2


class BundleError(PrefeedError):
    http_status = 503
    exit_code = 3


class Unavailable(PrefeedError):
    """A dependency (``which``: "redis" or "database") cannot be reached."""

    http_status = 503
    exit_code = 4

    def __init__(self, which: str, detail: str = "") -> None:
        self.which = which
        super().__init__(f"{which} is unavailable" + (f": {detail}" if detail else ""))
