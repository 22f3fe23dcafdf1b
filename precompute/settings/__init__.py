"""Settings: one object, built from the environment when the CLI, app or worker starts (never at import).

Every tunable is a field of ``Settings`` declared with ``setting(...)`` (``environment.py``) in one of the groups
``Settings`` inherits: where state lives (``connections.py``), what the pipeline reads and precomputes
(``pipeline.py``), what the API accepts (``serving.py``), the job side (``workers.py``), the ranking's candidate
sources and training (``ranking.py``), experiments' impressions (``experiments.py``) and abuse limits and cursor
rotation (``security.py``). Its environment variable, default, unit and meaning live in that one declaration.
``from_env`` parses the environment from it, ``as_env`` writes it back for child processes, and ``markdown_table``
renders the table of ``docs/configuration.md`` (``manage.py docs`` writes the page; ``tests/test_settings.py``
checks they agree).
Code receives a ``Settings`` (or the values it needs) from its caller; nothing reads a module-level default.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from ..errors import ConfigError
from .connections import ConnectionSettings, check_url, normalize_database_url, redact_url
from ..units import DAY
from .environment import as_env as _as_env, markdown_table as _markdown_table, public as _public
from .environment import values_from_env as _values_from_env, without_config as _without_config
from .experiments import ExperimentSettings
from .pipeline import PipelineSettings
from .ranking import TRAIN_LABELS, TRAIN_LOSSES, RankingSettings
from .security import SecuritySettings
from .serving import ServingSettings
from .workers import LOG_LEVELS, WorkerSettings

__all__ = ("DAY", "LOG_LEVELS", "TRAIN_LABELS", "TRAIN_LOSSES", "Settings", "markdown_table",
           "normalize_database_url", "without_prefeed_config")


@dataclasses.dataclass(frozen=True)
class Settings(SecuritySettings, ExperimentSettings, RankingSettings, WorkerSettings, ServingSettings,
               PipelineSettings, ConnectionSettings):
    """Every setting. A dataclass takes its bases' fields from the last base to the first, so they run, here and in
    ``docs/configuration.md``: connections, pipeline, serving, workers, ranking, experiments, security."""

    def __post_init__(self) -> None:
        # Paths derived from ``var_dir`` unless given (the empty default means "derive").
        if not self.database_url:
            object.__setattr__(self, "database_url", f"sqlite:///{(Path(self.var_dir) / 'prefeed.db').as_posix()}")
        object.__setattr__(self, "database_url", normalize_database_url(self.database_url))
        for name in ("database_url", "redis_url", "queue_redis_url", "feed_redis_url"):
            check_url(_env(name), getattr(self, name))
        if "{" in self.key_prefix or "}" in self.key_prefix:
            raise ConfigError("PREFEED_KEY_PREFIX must not contain braces: they would become the keys' hash tag")
        if (self.queue_redis_url or "").split("://")[0].endswith("+cluster"):
            raise ConfigError("QUEUE_REDIS_URL cannot be a cluster (RQ needs one Redis); put FEED_REDIS_URL there")
        if not str(self.model_dir) or self.model_dir == Path(""):
            object.__setattr__(self, "model_dir", Path(self.var_dir) / "models")
        if self.page_limit_default > self.page_limit_max:
            raise ConfigError("PREFEED_PAGE_LIMIT_DEFAULT must not exceed PREFEED_PAGE_LIMIT_MAX")
        if self.diversity_max >= self.diversity_window:
            raise ConfigError("PREFEED_DIVERSITY_MAX must be less than PREFEED_DIVERSITY_WINDOW (or 0: off)")
        if self.impressions_keep < self.attribution_window:
            raise ConfigError("PREFEED_IMPRESSIONS_KEEP must be at least PREFEED_ATTRIBUTION_WINDOW: a page must be "
                              "kept as long as an event may be attributed to it")
        for name, allowed in (("log_level", LOG_LEVELS), ("train_loss", ("auto", *TRAIN_LOSSES)),
                              ("train_labels", TRAIN_LABELS)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{_env(name)} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides) -> Settings:
        """Settings from ``env`` (default: this process's environment); unset or empty variables keep their
        default. A malformed value raises ``ConfigError`` naming the variable."""
        env = os.environ if env is None else env
        values = _values_from_env(cls, env)
        values.update(overrides)
        return cls(**values)

    @property
    def queue_url(self) -> str | None:
        """The Redis of the RQ queue and the dirty-user set."""
        return self.queue_redis_url or self.redis_url

    @property
    def feed_url(self) -> str | None:
        """The Redis (or cluster) of feeds and item states."""
        return self.feed_redis_url or self.redis_url

    def with_redis(self, url: str) -> Settings:
        return dataclasses.replace(self, redis_url=url)

    def child_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) without any prefeed configuration, plus these settings:
        the environment for a child process that must see exactly these settings."""
        return {**without_prefeed_config(base), **self.as_env()}

    def as_env(self) -> dict[str, str]:
        """The environment that makes a child process (worker, API) build these same settings."""
        return _as_env(self)

    def public(self) -> dict[str, str]:
        """Every setting as its environment variable and value, secrets and URL passwords masked (for display)."""
        return _public(self, redact_url)


def markdown_table() -> str:
    """The table of settings in ``docs/configuration.md``, rendered from the declarations above."""
    return _markdown_table(Settings)


def without_prefeed_config(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) less every variable that configures prefeed."""
    return _without_config(Settings, base)


def _env(name: str) -> str:
    return Settings.__dataclass_fields__[name].metadata["env"]
