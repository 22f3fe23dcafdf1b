"""Every Redis key prefeed uses, named in one place under one prefix (``Settings.key_prefix``)."""

from __future__ import annotations


class Keys:
    """Every key prefeed uses, under one prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.boost_prefix = f"{prefix}boost:"     # one key per boosted item: value weight, native TTL
        self.inactive = f"{prefix}inactive"        # set of deactivated item ids
        self.dirty = f"{prefix}dirty"              # zset user_id -> time it may next be claimed
        self.drain_flag = f"{prefix}drain:pending"
        self.drain_scheduled_flag = f"{prefix}drain:scheduled"
        # Popular lists hold 64-bit ids; "v2" keeps them apart from the 32-bit lists of earlier versions, which
        # an old worker may still publish during a rolling upgrade.
        self.popular_global = f"{prefix}popular:v2:global"

    def feed(self, user_id: int) -> str:
        return f"{self.prefix}feed:{user_id}"

    def boost(self, item_id: int) -> str:
        return f"{self.boost_prefix}{item_id}"

    def seen(self, user_id: int) -> str:
        return f"{self.prefix}seen:{user_id}"       # zset item_id -> history version of the interaction

    def popular_category(self, category: int) -> str:
        return f"{self.prefix}popular:v2:cat:{category}"
