"""The candidate sources and the simple methods, declared once.

A source proposes candidates for a user and sets its bit in each candidate's flags; the feature layout gets one
``ux_from_<name>`` column per source (in the order declared here, which is the bits' order) and the count of a
candidate's sources; ``evaluate`` reports each source's candidate recall under its name; a source that scores its
candidates names the ``Candidates`` field holding the score, and the simple method that ranks a user's candidates
by it (an experiment's arm, ``ranking/methods.py``). Everything else reads this list: adding a source is one entry
here plus the function that proposes its candidates (docs/development.md, "Adding a candidate source").

The simple methods (``METHODS``) are what an experiment's arm may rank by without a model, and what ``evaluate``
judges as baselines: all-time popularity, popularity over a window, and each scoring source on its own.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Source:
    name: str                   # its flag column is ``ux_from_<name>``, its row in evaluate's recall table <name>
    bit: int                    # its bit in a candidate's flags (a power of two, below 2**15: flags are int16)
    score: str | None = None    # the ``Candidates`` field holding its score of each candidate, if it scores them
    method: str | None = None   # the simple method ranking a user's candidates by that score
    window: str | None = None   # a recent-popularity list: the window (``layout.WINDOWS``) it is popular over

    @property
    def column(self) -> str:
        return f"ux_from_{self.name}"


#: Every source, in the order of its bit (the layout's column order).
SOURCES = (
    Source("covisit", 1, score="cov_score", method="covisit"),        # co-visitation with the recent items
    Source("category", 2),                                            # popular in the user's top categories
    Source("global", 4),                                              # popular overall
    Source("recent_1h", 8, window="1h"),                              # popular over the last hour
    Source("recent_1d", 16, window="1d"),                             # popular over the last day
    Source("knn", 32, score="knn_score", method="item_knn"),          # item-kNN of the user's history
    Source("latent", 64, score="latent_score", method="latent"),      # the latent model's best items
)
BY_NAME = {s.name: s for s in SOURCES}
#: Every source bit set: a candidate's flags are below ``ALL + 1``.
ALL = sum(s.bit for s in SOURCES)
#: The recent-popularity sources: (window, bit), in declared order.
RECENT = tuple((s.window, s.bit) for s in SOURCES if s.window)
#: Evaluate's candidate-recall table: the scoring sources first, then the lists, as it has always printed them.
REPORT_ORDER = ("covisit", "knn", "latent", "recent_1h", "recent_1d", "category", "global")
#: The simple methods: name → whether it takes a window (``recent:<window>``).
METHODS = {"popular": False, "recent": True, **{s.method: False for s in SOURCES if s.method}}
#: The candidate score each scoring source's method ranks by.
METHOD_SCORE = {s.method: s.score for s in SOURCES if s.method}


def bit(name: str) -> int:
    return BY_NAME[name].bit
