"""init-db brings a database of an earlier version's data model up to date without losing anything, and keeps
stored event types meaning what they meant."""

import dataclasses

import pytest
from sqlalchemy import insert, select, text
from sqlalchemy.exc import IntegrityError

from precompute.data import engine as db
from precompute.data.tables import Event, Item, ItemAttribute, ItemCategory, StoredEventType, User
from precompute.errors import ConfigError
from precompute.ranking.item_loader import load_item_table
from precompute.ranking.layout import for_settings
from precompute.data.recording import NewEvent, record
from precompute.settings import Settings
from tests.conftest import own_database

# The tables as the version with one category and the generator's columns on every item created them.
OLD_SCHEMA = """
CREATE TABLE items (id INTEGER NOT NULL PRIMARY KEY, category SMALLINT NOT NULL, price FLOAT NOT NULL,
                    created_at FLOAT NOT NULL, active BOOLEAN NOT NULL, quality FLOAT NOT NULL,
                    photos SMALLINT NOT NULL, seller_rating FLOAT NOT NULL);
CREATE INDEX ix_items_category ON items (category);
CREATE TABLE users (id INTEGER NOT NULL PRIMARY KEY, created_at FLOAT NOT NULL, history_version BIGINT NOT NULL);
CREATE TABLE events (id INTEGER NOT NULL PRIMARY KEY, user_id INTEGER REFERENCES users (id),
                     item_id INTEGER REFERENCES items (id), type SMALLINT NOT NULL, ts FLOAT NOT NULL,
                     client_event_id VARCHAR(64) UNIQUE);
INSERT INTO items VALUES (1, 3, 9.5, 100.0, TRUE, 0.7, 3, 4.5), (2, 0, 1.0, 200.0, FALSE, 0.1, 1, 2.0);
INSERT INTO users VALUES (5, 0.0, 1);
INSERT INTO events VALUES (1, 5, 2, 1, 50.0, NULL), (2, 5, 1, 1, 60.0, 'order-1')
"""


@pytest.fixture
def own_url(tmp_path_factory):
    yield from own_database(tmp_path_factory, "upgrade")


def test_init_db_moves_the_one_category_items_table_to_categories_and_attributes(own_url):
    # given a database written by the version with one category column and the generator's columns on items
    engine = db.make_engine(own_url)
    with engine.begin() as conn:
        for statement in OLD_SCHEMA.split(";"):
            conn.execute(text(statement))
    # when init-db runs with a declaration that would give its stored codes other meanings, it refuses
    with pytest.raises(ConfigError, match="type 'click' as code 2, which is 'rating'"):
        db.init_db(engine, Settings(database_url=own_url, event_types=(("view", 1.0), ("rating", 5.0))))
    # and with today's default (twice: it is idempotent) it brings the database up to date
    db.init_db(engine, Settings(database_url=own_url))
    db.init_db(engine, Settings(database_url=own_url))
    # then every item keeps its price, time and status, its category is a row of item_categories and the three
    # columns are attributes under their names; the events are untouched
    with engine.connect() as conn:
        assert sorted(conn.execute(select(Item.id, Item.price, Item.created_at, Item.active)).all()) == \
            [(1, 9.5, 100.0, True), (2, 1.0, 200.0, False)]
        assert sorted(conn.execute(select(ItemCategory.item_id, ItemCategory.category)).all()) == [(1, 3), (2, 0)]
        assert sorted(conn.execute(select(ItemAttribute.item_id, ItemAttribute.name, ItemAttribute.value)).all()) == [
            (1, "photos", 3.0), (1, "quality", 0.7), (1, "seller_rating", 4.5),
            (2, "photos", 1.0), (2, "quality", 0.1), (2, "seller_rating", 2.0)]
        assert conn.execute(select(Event.id, Event.user_id, Event.item_id, Event.type, Event.ts, Event.client_event_id)
                            .order_by(Event.id)).all() == [(1, 5, 2, 1, 50.0, None), (2, 5, 1, 1, 60.0, "order-1")]
        # and its events keep the four types that version stored them with
        assert conn.execute(select(StoredEventType.name).order_by(StoredEventType.code)).scalars().all() == \
            ["view", "click", "contact", "purchase"]
    # and an item may now be created bare, while events still refuse items that do not exist
    with engine.begin() as conn:
        conn.execute(insert(Item).values(id=2**62, active=True))
    with pytest.raises(IntegrityError):
        with engine.begin() as conn:
            conn.execute(insert(Event).values(user_id=5, item_id=777, type=1, ts=60.0))
    # and an event id, unique across all users in that version, is now each user's own: another user's "order-1"
    # is stored, user 5's again is refused (ids given: that version's PostgreSQL table generated none)
    with engine.begin() as conn:
        conn.execute(insert(User).values(id=6, created_at=0.0, history_version=0))
        conn.execute(insert(Event).values(id=3, user_id=6, item_id=1, type=1, ts=70.0, client_event_id="order-1"))
    with pytest.raises(IntegrityError):
        with engine.begin() as conn:
            conn.execute(insert(Event).values(id=4, user_id=5, item_id=1, type=1, ts=70.0, client_event_id="order-1"))
    engine.dispose()


def test_init_db_records_event_types_and_refuses_a_declaration_that_reorders_them(own_url):
    # given a database whose event types were recorded from the default declaration
    engine = db.make_engine(own_url)
    settings = Settings(database_url=own_url)
    db.init_db(engine, settings)
    # when a new type is declared after the stored ones, init-db records it
    more = dataclasses.replace(settings, event_types=settings.event_types + (("share", 3.0),))
    db.init_db(engine, more)
    with engine.connect() as conn:
        assert conn.execute(select(StoredEventType.name).order_by(StoredEventType.code)).scalars().all() == \
            ["view", "click", "contact", "purchase", "share"]
    # but a declaration that swaps two stored types, or drops one, is refused with the stored meaning named
    swapped = dataclasses.replace(more, event_types=(("click", 2.0), ("view", 1.0)) + more.event_types[2:])
    with pytest.raises(ConfigError, match="type 'view' as code 1, which is 'click'"):
        db.init_db(engine, swapped)
    with pytest.raises(ConfigError, match="type 'share' as code 5, which is not declared"):
        db.init_db(engine, settings)
    # and so does every reader of stored type codes (workers and training load the item matrices), without init-db
    with pytest.raises(ConfigError, match="type 'view' as code 1, which is 'click'"):
        load_item_table(engine, swapped)
    load_item_table(engine, more)
    engine.dispose()


def test_a_type_name_that_makes_a_feature_twice_is_one_line_config_error():
    # given a declared event type named like a column the layout has anyway ("user_log_events")
    settings = Settings(event_types=(("view", 1.0), ("events", 3.0)))
    # then building the feature layout is refused with a message naming the clash, not a bare ValueError
    with pytest.raises(ConfigError, match="user_log_events twice"):
        for_settings(settings)


def test_events_recorded_under_a_contradicting_declaration_are_refused(own_url):
    # given a database whose types were recorded from the default declaration
    engine = db.make_engine(own_url)
    db.init_db(engine, Settings(database_url=own_url))
    # when an API process started with the first two types swapped records an event
    swapped = Settings(database_url=own_url, event_types=(("click", 2.0), ("view", 1.0), ("contact", 4.0)))
    with pytest.raises(ConfigError, match="type 'view' as code 1, which is 'click'"):
        record(engine, [NewEvent(user_id=1, item_id=1, type=1, ts=100.0)], swapped)
    # then nothing was written
    with engine.connect() as conn:
        assert conn.execute(select(Event.id)).first() is None
        assert conn.execute(select(Item.id)).first() is None
    engine.dispose()
