"""The model's input columns, declared once: names, order, groups and dtype.

The layout follows the data model's declarations (``for_settings``): one column per declared item attribute and
per-type columns named after the declared event types, so a catalogue with other attributes or types has another
layout. ``features.build`` writes every column by name through this declaration, ``ItemTable.static`` orders its
block by it, bundles record it in their metadata, and a bundle whose names, order or dtype differ is refused
(``bundle.load``). Reordering two names here therefore reorders the matrix consistently (and makes existing bundles
refuse to load until retrained); it can never feed a model columns in an order it was not trained on.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ..errors import BundleError, ConfigError
from ..units import DAY, HOUR
from . import shown as shown_columns, sources

#: Windows (name, seconds before the clock) of the type-weighted popularity counts (``ItemTable.windowed``;
#: columns ``item_log_weighted_<name>``, ``item_log_share_<name>``; ``popularity.py``).
WINDOWS = (("1h", HOUR), ("1d", DAY), ("3d", 3 * DAY), ("7d", 7 * DAY), ("30d", 30 * DAY))


def live_names() -> tuple[str, ...]:
    """The "item_live" columns, in order (``popularity.block``)."""
    return (*(f"item_log_weighted_{w}" for w, _ in WINDOWS), "item_log_weighted_all",
            *(f"item_log_share_{w}" for w, _ in WINDOWS), "item_recent_trend")


@dataclasses.dataclass(frozen=True)
class FeatureLayout:
    groups: tuple[tuple[str, tuple[str, ...]], ...]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        names = self.names
        if len(set(names)) != len(names):
            twice = sorted({name for name in names if names.count(name) > 1})
            raise ValueError(f"feature names must be unique: {', '.join(twice)} twice")
        object.__setattr__(self, "_index", {name: k for k, name in enumerate(names)})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for _, group in self.groups for name in group)

    def __len__(self) -> int:
        return sum(len(group) for _, group in self.groups)

    def group(self, name: str) -> tuple[str, ...]:
        return dict(self.groups)[name]

    def has(self, group: str) -> bool:
        """Whether the layout declares ``group`` (the "shown" group is declared only when ranking with it)."""
        return any(name == group for name, _ in self.groups)

    def start(self, group: str) -> int:
        """Column of the group's first feature (a group's columns are contiguous)."""
        return self._index[self.group(group)[0]]

    def index(self, name: str) -> int:
        return self._index[name]

    def stack(self, group: str, columns: dict[str, np.ndarray]) -> np.ndarray:
        """The group's columns from ``{name: array}``, in declared order, as one ``dtype`` matrix. Raises if
        ``columns`` names a feature the group does not declare or misses one it does."""
        want = self.group(group)
        if set(columns) != set(want):
            raise ValueError(f"feature group {group!r}: built {sorted(set(columns) ^ set(want))} differ from the "
                             "declared layout")
        return np.column_stack([columns[name] for name in want]).astype(self.dtype)

    def as_meta(self) -> dict:
        """What a bundle records about the layout it was trained with."""
        return {"feature_names": list(self.names), "n_features": len(self), "feature_dtype": self.dtype}

    def check(self, names, dtype, what: str) -> None:
        """Refuse (``BundleError``) a model or bundle built for other names, another order or another dtype."""
        mine = list(self.names)
        if not isinstance(names, list) or names != mine:
            if not isinstance(names, list):
                detail = "no feature names recorded"
            elif len(names) != len(mine):
                detail = f"{len(names)} features, this prefeed builds {len(mine)}"
            else:
                k = next(i for i, (a, b) in enumerate(zip(names, mine)) if a != b)
                detail = (f"the same number of features in a different order or with other names: column {k} is "
                          f"{names[k]!r} there, {mine[k]!r} here")
            raise BundleError(f"{what} was built for a different feature set ({detail}; feature names follow "
                              "PREFEED_ITEM_ATTRIBUTES and PREFEED_EVENT_TYPES); retrain")
        if dtype is not None and dtype != self.dtype:
            raise BundleError(f"{what} was built for {dtype} features, this prefeed builds {self.dtype}; retrain")


def for_settings(settings) -> FeatureLayout:
    """The layout a ``Settings`` implies: its declared item attributes and event types name columns.
    ``ConfigError`` when a declared name makes a column another column already is (a type named ``events``)."""
    try:
        return for_declaration(tuple(settings.item_attributes), tuple(name for name, _ in settings.event_types),
                               shown=settings.rank_shown)
    except ValueError as exc:
        raise ConfigError(f"PREFEED_EVENT_TYPES / PREFEED_ITEM_ATTRIBUTES: {exc}; rename the type or "
                          "attribute") from None


@functools.lru_cache(maxsize=16)
def for_declaration(attributes: tuple[str, ...], types: tuple[str, ...], shown: bool = False) -> FeatureLayout:
    """The layout for these attribute names and event type names (weakest type first), built once per
    declaration. Per-type columns: a log count of each type, and the rate of each stronger type relative to the
    first (``rate_names``). ``shown``: with the columns of what each user was shown (``shown.py``)."""
    return FeatureLayout(groups=(
        # Per item, independent of user and clock: computed once per item table (``ItemTable.static``).
        ("item_static", (
            "item_log_price", "item_price_vs_category", *(f"item_attr_{a}" for a in attributes),
            *(f"item_log_{t}" for t in types), *(f"item_{t}_rate" for t in types[1:]), "item_log_pop_rank", "item_log_category_rank", "item_log_category_size",
            "item_category_global_share")),
        # Per item, at the clock of the batch.
        ("item_clock", ("item_age_days", "item_days_since_first_event")),
        # Per item, popularity as of the user's clock (``popularity.py``): one block in serving, one per replayed step.
        ("item_live", live_names()),
        # Per user, broadcast over the user's candidates.
        ("user", (
            "user_log_events", *(f"user_log_{t}" for t in types), "user_log_distinct_items",
            "user_distinct_categories", "user_days_since_last", "user_days_since_first", "user_events_24h",
            "user_events_7d", *(f"user_{t}_rate" for t in types[1:]), "user_mean_log_price",
            "user_std_log_price", "user_repeat_rate")),
        # Per (user, the item's strongest category for that user).
        ("user_category", (
            "ux_category_share", "ux_category_rank", "ux_days_since_category", "ux_log_category_weight",
            "ux_category_events_7d", "ux_category_share_recent")),
        # Per (user, item): price fit and co-visitation with the user's recent items.
        ("user_item", (
            "ux_price_diff", "ux_price_z", "ux_price_ratio", "ux_covisit_score", "ux_log_covisit_score",
            "ux_covisit_count", "ux_covisit_norm", "ux_covisit_last", "ux_knn_score", "ux_knn_norm",
            "ux_latent_score", "ux_popularity_vs_user", "ux_seen_before")),
        # Which candidate sources produced the item.
        ("source", (*(s.column for s in sources.SOURCES), "ux_n_sources")),
        # Per (user, item): the pages that showed it to the user (``shown.py``).
        *((("shown", shown_columns.COLUMNS),) if shown else ()),
    ))
