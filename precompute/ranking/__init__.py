"""Ranking: item matrices, co-visitation, candidates, features, the CatBoost ranker, model bundles and the simple
methods; nothing of experiments (``precompute/pipeline/`` glues both)."""
