"""Experiments' records: impressions (every page served), how they reach the database, how long they are kept, and
the attribution window."""

from __future__ import annotations

import dataclasses

from ..units import DAY
from .environment import setting


@dataclasses.dataclass(frozen=True)
class ExperimentSettings:
    # -- impressions and attribution -----------------------------------------------------------------------
    impressions: bool = setting(True, "PREFEED_IMPRESSIONS", "record every page served (user, experiment, arm, "
                                "items and positions, time, request id) for attribution and `experiments report`; "
                                "`off`: pages are not recorded and no event is attributed")
    impressions_flush_ms: int = setting(500, "PREFEED_IMPRESSIONS_FLUSH_MS", "an API process sends the pages it "
                                        "served to Redis this often, in one write (an API process that dies loses "
                                        "at most this much)", unit="ms", minimum=10)
    impressions_collect_interval: float = setting(5.0, "PREFEED_IMPRESSIONS_COLLECT_INTERVAL", "a worker job moves "
                                                  "the pages buffered in Redis to the database, and attributes the "
                                                  "events stored since, this long after the first page waiting",
                                                  unit="s", minimum=0.1)
    impressions_buffer_max: int = setting(1_000_000, "PREFEED_IMPRESSIONS_BUFFER_MAX", "pages the Redis buffer "
                                          "holds while no worker collects them; older ones are dropped and counted "
                                          "lost", unit="pages")
    impressions_user_max: int = setting(60, "PREFEED_IMPRESSIONS_USER_MAX", "an API process records at most this "
                                        "many pages of one user per minute; more are served but not recorded, and "
                                        "counted (prefeed_impressions_capped_total): a client reading one user's "
                                        "feed at its full rate cannot bury that user's clicks under millions of "
                                        "pages; 0: no bound", unit="pages/min", minimum=0)
    impressions_keep: int = setting(2 * DAY, "PREFEED_IMPRESSIONS_KEEP", "a served page is kept in the database "
                                    "this long after it was served, on the events' clock (at least the attribution "
                                    "window); what the report counts is kept per user and arm for good", unit="s")
    attribution_window: int = setting(DAY, "PREFEED_ATTRIBUTION_WINDOW", "an event on an item served to its user at "
                                      "most this long before is attributed to the newest page that served it",
                                      unit="s", minimum=1)
