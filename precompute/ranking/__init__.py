"""Ranking: item matrices, co-visitation, candidates, features, the CatBoost ranker, model bundles, and the
``Pipeline`` that reads histories from ``data`` and writes ranked feeds through ``feeds``."""
