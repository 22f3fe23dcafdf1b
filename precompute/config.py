"""Settings: one object, built from the environment when the CLI, app or worker starts (never at import)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from . import defaults
from .errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Settings:
    database_url: str
    redis_url: str | None            # None: the CLI starts an embedded Valkey server
    model_dir: Path
    admin_token: str | None = None
    var_dir: Path = Path(defaults.VAR_DIR)
    key_prefix: str = defaults.KEY_PREFIX
    queue_name: str = defaults.QUEUE_NAME
    max_candidates: int = defaults.MAX_CANDIDATES
    feed_length: int = defaults.FEED_LENGTH
    feed_ttl: int = defaults.FEED_TTL_SECONDS
    batch_size: int = defaults.BATCH_SIZE
    retry_intervals: tuple[int, ...] = defaults.JOB_RETRY_INTERVALS

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides) -> Settings:
        env = os.environ if env is None else env
        var_dir = Path(env.get("PREFEED_VAR_DIR", defaults.VAR_DIR))
        values = dict(
            database_url=normalize_database_url(
                env.get("DATABASE_URL") or f"sqlite:///{(var_dir / 'prefeed.db').as_posix()}"
            ),
            redis_url=env.get("REDIS_URL") or None,
            model_dir=Path(env.get("MODEL_DIR") or var_dir / "models"),
            admin_token=env.get("PREFEED_ADMIN_TOKEN") or None,
            var_dir=var_dir,
            key_prefix=env.get("PREFEED_KEY_PREFIX", defaults.KEY_PREFIX),
            queue_name=env.get("PREFEED_QUEUE", defaults.QUEUE_NAME),
            max_candidates=_int(env, "PREFEED_MAX_CANDIDATES", defaults.MAX_CANDIDATES),
            feed_length=_int(env, "PREFEED_FEED_LENGTH", defaults.FEED_LENGTH),
            feed_ttl=_int(env, "PREFEED_FEED_TTL", defaults.FEED_TTL_SECONDS),
            batch_size=_int(env, "PREFEED_BATCH_SIZE", defaults.BATCH_SIZE),
            retry_intervals=_intervals(env.get("PREFEED_RETRY_INTERVALS")),
        )
        values.update(overrides)
        return cls(**values)

    def with_redis(self, url: str) -> Settings:
        return dataclasses.replace(self, redis_url=url)

    def child_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) without any prefeed configuration, plus these settings:
        the environment for a child process that must see exactly these settings."""
        return {**without_prefeed_config(base), **self.as_env()}

    def as_env(self) -> dict[str, str]:
        """The environment that makes a child process (worker, API) build these same settings."""
        env = {
            "DATABASE_URL": self.database_url,
            "MODEL_DIR": str(self.model_dir),
            "PREFEED_VAR_DIR": str(self.var_dir),
            "PREFEED_KEY_PREFIX": self.key_prefix,
            "PREFEED_QUEUE": self.queue_name,
            "PREFEED_MAX_CANDIDATES": str(self.max_candidates),
            "PREFEED_FEED_LENGTH": str(self.feed_length),
            "PREFEED_FEED_TTL": str(self.feed_ttl),
            "PREFEED_BATCH_SIZE": str(self.batch_size),
            "PREFEED_RETRY_INTERVALS": ",".join(map(str, self.retry_intervals)),
        }
        if self.redis_url:
            env["REDIS_URL"] = self.redis_url
        if self.admin_token:
            env["PREFEED_ADMIN_TOKEN"] = self.admin_token
        return env


def without_prefeed_config(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) less every variable that configures prefeed."""
    base = os.environ if base is None else base
    return {k: v for k, v in base.items() if not k.startswith(_CONFIG_PREFIXES)}


_CONFIG_PREFIXES = ("PREFEED_", "REDIS_URL", "DATABASE_URL", "MODEL_DIR")


def normalize_database_url(url: str) -> str:
    """Accept the usual ``postgresql://`` spelling and use psycopg 3 for it."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {value}")
    return value


def _intervals(raw: str | None) -> tuple[int, ...]:
    """``PREFEED_RETRY_INTERVALS="5,30,120"``: seconds before each retry of a failed job (their count = retries)."""
    if not raw:
        return defaults.JOB_RETRY_INTERVALS
    try:
        values = tuple(int(x) for x in raw.split(","))
    except ValueError:
        raise ConfigError(f"PREFEED_RETRY_INTERVALS must be comma-separated seconds, got {raw!r}") from None
    if not values or any(v < 0 for v in values):
        raise ConfigError("PREFEED_RETRY_INTERVALS needs at least one non-negative number of seconds")
    return values
