"""The database side: SQLAlchemy tables and engine, recording events, users' histories, the catalogue, bulk
loading and the synthetic marketplace. Imports nothing else of prefeed but ``settings`` and ``errors``."""
