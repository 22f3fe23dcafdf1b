"""Offline evaluation: a global time split of the event log, baselines and the trained ranker ranked at the cut,
and the metrics that compare them (``manage.py evaluate``).

The stages take arrays, not a database: ``split`` cuts a log given as (user, item, type, ts) arrays, ``baselines``
and ``model`` rank the judged users, ``metrics`` summarizes ranked lists against the truth, ``report`` prints and
writes the result; ``run`` reads the log once and glues them.
"""
