"""prefeed's core, importable without Flask or RQ; ``api`` and ``jobs`` build on it.

    settings, errors    one settings object, one error tree
    data/               the database: tables, engine, recording events, histories, catalogue, bulk loading,
                        the synthetic marketplace
    ranking/            item matrices, co-visitation, candidates, features, the CatBoost ranker, bundles, the
                        simple methods
    experiments/        experiments' arms and placement, impressions, attribution, the report
    pipeline/           the Pipeline that glues them (reads ``data``, ranks by each user's arm, writes through
                        ``feeds``)
    feeds/              everything in Redis: key names, the feed codec, the guarded store, the dirty set, the
                        live page (seen/inactive drop, boost rule, fallback)

Dependencies point one way: ``data`` ← ``ranking`` → ``feeds``; ``experiments`` → ``ranking``; ``pipeline`` →
``ranking``, ``experiments``; ``data`` and ``feeds`` know nothing of each other.
"""
