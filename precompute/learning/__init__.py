"""Learning and judging: everything that fits or judges a ranker, and nothing a worker needs to rank a user.

``train`` (what ``manage.py train`` runs) fits the ranker on replayed periods of the log (``fit``, ``periods``,
``steps``, ``ahead``, ``objective``) and judges it against every simple method before it may be promoted.
``evaluate`` (``manage.py evaluate``) judges every method under two protocols: ``split`` cuts the log at a time,
``baselines`` and ``ranker_lists`` rank the judged users as of the cut and ``metrics`` scores them (static);
``replay`` ranks each user's next steps at their own clocks (``activity``: popularity at any clock). ``bootstrap``
gives the intervals, ``report`` prints and writes a result.

Workers import ``precompute.ranking`` only; a test checks that no module of this package is loaded in one.
"""
