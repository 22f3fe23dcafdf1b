"""Everything in Redis: key names (``keys``), the binary feed format (``codec``), the version-guarded store, the
dirty-user set, and the live page served per request (seen/inactive drop, boost rule, fallback)."""
