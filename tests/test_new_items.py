"""New items that get seen (``precompute/feeds/new_items.py``): an item created through the API within the window is
given one slot in every ``PREFEED_NEW_ITEM_EVERY`` of the pages of users whose feed shares its category, until the
pages recorded have shown it ``PREFEED_NEW_ITEM_IMPRESSIONS`` times; then it has no slot."""

from __future__ import annotations

import dataclasses
import time

import pytest
from hypothesis import given, settings as hsettings, strategies as st
from sqlalchemy import select

from api import create_app
from api.services import services
from precompute.data.tables import Item, ItemCategory
from precompute.feeds.keys import Keys
from precompute.feeds.new_items import NewItemRule, NewItems, NewItemsCopy, place

NEW_ID = 8_000_000_000_000          # ids of this file's items, far from the synthetic world's
_fresh = iter(range(NEW_ID, NEW_ID + 10 ** 6))


# -- the rule, a plain function ----------------------------------------------------------------------------------

@st.composite
def cases(draw):
    n = draw(st.integers(0, 40))
    items = [(i, float(100 - i), draw(st.booleans())) for i in range(1, n + 1)]
    offered = draw(st.lists(st.tuples(st.integers(1, 80), st.frozensets(st.integers(0, 4), max_size=2)),
                            max_size=12, unique_by=lambda x: x[0]))
    return (items, draw(st.integers(0, 30)), draw(st.integers(1, 6)), sorted(offered),
            draw(st.none() | st.frozensets(st.integers(0, 4))), draw(st.frozensets(st.integers(1, 80))),
            draw(st.integers(1, 10 ** 6)))


@given(cases())
@hsettings(max_examples=300, deadline=None)
def test_placed_items_fill_only_their_slots_and_the_rest_keeps_its_order(case):
    items, start, every, offered, taste, blocked, user = case
    out = place(items, start, every, offered, taste, blocked.__contains__, user)
    assert len(out) == len(items)
    listed = {i for i, _, _ in items}
    placed = [k for k, (i, _, _) in enumerate(out) if i not in listed]
    # a placed item only in a new item's slot, offered, fitting the user's taste, not blocked, at most once
    fits = {i for i, cats in offered if (taste is None or not cats or cats & taste) and i not in blocked}
    assert all((start + k + 1) % every == 0 for k in placed)
    assert all(out[k][0] in fits and out[k][2] is False for k in placed)
    assert len({out[k][0] for k in placed}) == len(placed)
    # the list's own items keep their order, shifted down by the placed ones, the last ones past the end
    assert [x for x in out if x[0] in listed] == items[:len(items) - len(placed)]
    # every slot of a new item holds one while a fitting item is left unplaced
    slots = [k for k in range(len(out)) if (start + k + 1) % every == 0]
    assert len(placed) == min(len(slots), len(fits - listed))


def test_the_rule_spreads_the_waiting_items_over_users():
    items = [(i, 1.0, False) for i in range(1, 11)]
    offered = [(i, frozenset({1})) for i in range(101, 106)]
    chosen = {place(items, 0, 10, offered, frozenset({1}), lambda i: False, u)[9][0] for u in range(1, 200)}
    assert chosen == {101, 102, 103, 104, 105}


def test_off_or_nothing_offered_is_the_list_itself():
    items = [(i, 1.0, False) for i in range(1, 11)]
    assert place(items, 0, 0, [(99, frozenset())], None, lambda i: False, 1) == items
    assert place(items, 0, 10, [], None, lambda i: False, 1) == items


# -- the waiting set in Redis ------------------------------------------------------------------------------------

def _writer(r, settings, **rule):
    values = dict(every=10, window=3600.0, impressions=3, most=100) | rule
    return NewItems(r, Keys(settings.key_prefix), NewItemRule(**values))


def _copy(r, settings) -> NewItemsCopy:
    copy = NewItemsCopy(r, Keys(settings.key_prefix))
    copy.sync()
    return copy


def test_an_item_waits_until_its_impressions_then_never_again(r, settings):
    writer, now = _writer(r, settings), 1_000_000.0
    # created within the window: waiting, with its categories; one created before the window: not
    assert writer.add([(1, now - 60, (3, 5)), (2, now - 7200, (3,))], now) == 1
    copy = _copy(r, settings)
    assert copy.waiting == {1: (now - 60, frozenset({3, 5}))}
    # pages of items it is not on count nothing; two impressions are not enough
    assert writer.count([[7, 8], [1, 9], [1]], copy.ids, now) == 0 and writer.shown(1) == 2
    assert _copy(r, settings).ids == {1}
    # the third impression ends its wait, and the copies see it
    assert writer.count([[1]], copy.ids, now) == 1
    assert _copy(r, settings).ids == frozenset()
    # registered again (an item put again as new): it has had its impressions
    assert writer.add([(1, now - 30, (3,))], now) == 0 and _copy(r, settings).ids == frozenset()


def test_items_past_the_window_or_the_most_tracked_leave(r, settings):
    writer, now = _writer(r, settings, most=3), 1_000_000.0
    writer.add([(i, now - 10 * i, ()) for i in range(1, 5)], now)
    assert _copy(r, settings).ids == {1, 2, 3}                  # the oldest (4) left at the bound
    # an hour on, items 2 and 3 (created 20 and 30 s before) have left the window: forgotten at the next change
    writer.add([(9, now + 3585, ())], now + 3585)
    copy = _copy(r, settings)
    assert copy.ids == {1, 9}
    # a copy offers only the items still new at the events' clock (all of them when it is not known)
    assert [i for i, _ in copy.offer(now + 3595, 3600.0)] == [9]
    assert [i for i, _ in copy.offer(None, 3600.0)] == [1, 9]


# -- through the API ----------------------------------------------------------------------------------------------

@pytest.fixture
def new_app(settings, world):
    app = create_app(dataclasses.replace(settings, new_item_every=10, new_item_impressions=4), {"TESTING": True})
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {world.key}"
    yield app, client
    services(app).engine.dispose()


def _category_of(world, item_id: int) -> int:
    with world.engine.connect() as conn:
        return conn.execute(select(ItemCategory.category).where(ItemCategory.item_id == item_id)
                            .order_by(ItemCategory.category)).scalars().first()


def _ids(client, uid: int, limit: int = 20, cursor: str | None = None) -> tuple[list[int], str | None]:
    body = client.get(f"/feed/{uid}?limit={limit}" + (f"&cursor={cursor}" if cursor else "")).get_json()
    return [x["item_id"] for x in body["items"]], body["next_cursor"]


def test_a_new_item_gets_its_slots_until_its_impressions_are_recorded(new_app, pipeline, own_users, admin, world):
    app, client = new_app
    uid = own_users(1)[0]
    pipeline.recompute([uid])
    before, _ = _ids(client, uid)
    # when an item is created in the category of the user's top item, and one in a category their feed lacks
    cat = _category_of(world, before[0])
    item, stranger = next(_fresh), next(_fresh)
    assert client.put(f"/items/{item}", headers=admin, json={"categories": [cat]}).status_code == 201
    assert client.put(f"/items/{stranger}", headers=admin, json={"categories": [999_999]}).status_code == 201
    try:
        # once the process's item states are read again (every PREFEED_LIVE_REFRESH_MS; here at once), bringing the
        # new items' counter with them
        services(app).pages.states.refresh(force=True)
        # then the user's page holds it in slot 10, the feed's own items moved down one; the stranger nowhere
        page, _ = _ids(client, uid)
        assert page[9] == item and page[:9] == before[:9] and page[10:] == before[9:19]
        assert stranger not in page
        # and a scroll holds it once, at slot 10, with nothing twice
        first, cursor = _ids(client, uid, 7)
        second, _ = _ids(client, uid, 7, cursor)
        scroll = first + second
        assert scroll.index(item) == 9 and len(set(scroll)) == len(scroll)
        # when its pages are recorded: the two pages above that held it are not enough, two more are
        services(app).impressions.flush()
        services(app).pages.new_items.sync()
        assert services(app).new_items.shown(item) == 2 and item in services(app).pages.new_items.ids
        assert all(item in _ids(client, uid)[0] for _ in range(2))
        services(app).impressions.flush()
        services(app).pages.states.refresh(force=True)
        # then it keeps no slot: the page is the feed again
        assert services(app).new_items.shown(item) == 4
        assert _ids(client, uid)[0] == before
    finally:
        with world.engine.begin() as conn:
            conn.execute(ItemCategory.__table__.delete().where(ItemCategory.item_id.in_([item, stranger])))
            conn.execute(Item.__table__.delete().where(Item.id.in_([item, stranger])))


def test_an_item_created_long_ago_or_inactive_is_not_new(new_app, admin, world):
    app, client = new_app
    old, off = next(_fresh), next(_fresh)
    try:
        assert client.put(f"/items/{old}", headers=admin,
                          json={"categories": [1], "created_at": time.time() - 3 * 86400}).status_code == 201
        assert client.put(f"/items/{off}", headers=admin, json={"categories": [1], "active": False}).status_code == 201
        services(app).pages.new_items.sync()
        assert services(app).pages.new_items.ids == frozenset()
    finally:
        with world.engine.begin() as conn:
            conn.execute(ItemCategory.__table__.delete().where(ItemCategory.item_id.in_([old, off])))
            conn.execute(Item.__table__.delete().where(Item.id.in_([old, off])))
