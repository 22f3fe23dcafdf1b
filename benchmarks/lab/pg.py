"""A PostgreSQL schema of a benchmark's own, for the benchmarks that measure on PostgreSQL as well as SQLite
(``import``, ``abuse``): created on the server of a URL, dropped after."""

from __future__ import annotations

import uuid


def own_schema(url: str):
    """A fresh schema in the PostgreSQL database at ``url``: its URL and a function dropping it."""
    from sqlalchemy import create_engine, text

    from precompute.settings import normalize_database_url

    base = normalize_database_url(url)
    schema = f"prefeed_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))

    def drop() -> None:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()

    return f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}", drop
