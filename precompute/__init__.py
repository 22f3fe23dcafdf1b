"""prefeed's core: data model, candidate generation, features, ranking and the feed codec.

Nothing here imports Flask or RQ; ``api`` and ``jobs`` build on this package.
"""
