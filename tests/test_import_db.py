"""Importing into the database (``precompute.data.importing``): every format lands in the tables, bad rows are
skipped and reported with their line, a second import stores nothing twice, ``strict`` writes nothing when a row
is bad, and unknown items are created or refused per ``PREFEED_EVENTS_CREATE_ITEMS``. Small files written here;
each test on a database of its own (SQLite, or a PostgreSQL schema with PREFEED_TEST_DATABASE_URL)."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import func, select, text

from precompute.data import engine as db
from precompute.data.importing import import_events, import_items
from precompute.data.tables import Event, Item, ItemAttribute, ItemCategory, User
from precompute.data.recording import NewEvent, record
from precompute.errors import InvalidInput
from precompute.settings import Settings
from tests.conftest import own_database

BIG = 2**63 - 1
VIEW, CLICK, CONTACT, PURCHASE = 1, 2, 3, 4
TABLES = (Item, ItemCategory, ItemAttribute, User, Event)


@pytest.fixture
def own_url(tmp_path_factory):
    yield from own_database(tmp_path_factory, "import")


@pytest.fixture
def setup(own_url, tmp_path):
    """Settings on the test's own database (attribute ``quality`` declared) and its engine, tables created."""
    s = Settings(database_url=own_url, var_dir=tmp_path, item_attributes=("quality",))
    engine = db.make_engine(own_url)
    db.init_db(engine, s)
    yield s, engine
    engine.dispose()


def write(tmp_path, name: str, content: str | bytes):
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def counts(engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t.__tablename__: conn.execute(select(func.count()).select_from(t)).scalar() for t in TABLES}


def catalogue(engine) -> dict[int, tuple]:
    """item id → (price, created_at, active, categories, attributes)."""
    with engine.connect() as conn:
        cats, attrs = {}, {}
        for i, c in conn.execute(select(ItemCategory.item_id, ItemCategory.category)):
            cats.setdefault(i, []).append(c)
        for i, name, v in conn.execute(select(ItemAttribute.item_id, ItemAttribute.name, ItemAttribute.value)):
            attrs.setdefault(i, {})[name] = v
        return {i: (p, c, a, sorted(cats.get(i, [])), attrs.get(i, {}))
                for i, p, c, a in conn.execute(select(Item.id, Item.price, Item.created_at, Item.active))}


def stored_events(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(Event.user_id, Event.item_id, Event.type, Event.ts, Event.value,
                                                      Event.client_event_id).order_by(Event.id))]


U_ITEM = ("1|Toy Story (1995)|01-Jan-1995||http://x|0|0|0|1|1|1|0|0|0|0|0|0|0|0|0|0|0|0|0\n"
          "2|Caf\xe9 (1996)|||http://y|0|0|0|0|0|0|0|0|1|0|0|0|0|0|0|0|0|0|0\n").encode("latin-1")
MOVIES = ("movieId,title,genres\n1,Toy Story (1995),Adventure|Animation|Children|Comedy|Fantasy\n"
          "3,Heat (1995),(no genres listed)\n")


def test_movielens_item_files_land_with_their_genres(setup, tmp_path):
    s, engine = setup
    # given u.item (Latin-1, several genres per film) and, later, movies.csv naming the same film
    import_items(engine, write(tmp_path, "u.item", U_ITEM), "movielens", s)
    items = catalogue(engine)
    # then each film has its genres as categories, its release date, no price, and is active
    assert items[1] == (None, 788918400.0, True, [3, 4, 5], {})
    assert items[2] == (None, None, True, [8], {})
    # when movies.csv is imported: film 1 is replaced whole, film 3 is new with no category
    res = import_items(engine, write(tmp_path, "movies.csv", MOVIES), "movielens", s)
    assert (res.items_created, res.items_updated) == (1, 1)
    items = catalogue(engine)
    assert items[1] == (None, None, True, [2, 3, 4, 5, 9], {})
    assert items[3] == (None, None, True, [], {})


def test_generic_items_sparse_64_bit_ids_and_declared_attributes_only(setup, tmp_path):
    s, engine = setup
    # given a CSV catalogue with ids near 2**63, no prices, a declared attribute and an undeclared one
    csv = write(tmp_path, "items.csv", "item_id,categories,price,created_at,quality,colour\n"
                                       f"{BIG},3|12,,2024-05-01T10:00:00Z,0.8,7\n{2**62},,,,,\n7,5,9.5,,,1\n")
    res = import_items(engine, csv, "csv", s)
    # then they land as given; the undeclared column is noted and not stored
    assert any("'colour'" in note for note in res.report.notes)
    items = catalogue(engine)
    assert items[BIG] == (None, 1714557600.0, True, [3, 12], {"quality": 0.8})
    assert items[2**62] == (None, None, True, [], {})
    assert items[7] == (9.5, None, True, [5], {})
    # and JSON lines replace an item whole (no categories, no attribute given: none left)
    jsonl = write(tmp_path, "items.jsonl", f'{{"item_id": {BIG}, "attributes": {{"other": 1}}}}\n'
                                           '{"item_id": 8, "price": "cheap"}\n'
                                           '{"item_id": 9, "categories": [4, 1], "attributes": {"quality": 0.5}}\n')
    res = import_items(engine, jsonl, "jsonl", s)
    assert res.report.refused == 1 and res.report.bad_rows[0].line == 2
    assert (res.items_created, res.items_updated) == (1, 1)
    items = catalogue(engine)
    assert items[BIG] == (None, None, True, [], {}) and items[9] == (None, None, True, [1, 4], {"quality": 0.5})


def test_an_import_does_not_revive_a_deactivated_item(setup, tmp_path):
    s, engine = setup
    csv = write(tmp_path, "items.csv", "item_id,price\n5,1.0\n")
    import_items(engine, csv, "csv", s)
    with engine.begin() as conn:
        conn.execute(text("UPDATE items SET active = false WHERE id = 5"))
    import_items(engine, write(tmp_path, "again.csv", "item_id,price\n5,2.0\n"), "csv", s)
    assert catalogue(engine)[5][:3] == (2.0, None, False)


def test_movielens_ratings_and_generic_events_land_creating_users_and_items(setup, tmp_path):
    s, engine = setup
    # given u.data (tab-separated), ratings.csv, a generic CSV and JSON lines, on an empty database
    import_events(engine, write(tmp_path, "u.data", "196\t242\t3\t881250949\n186\t302\t5\t891717742\n"),
                  "movielens", s)
    res = import_events(engine, write(tmp_path, "ratings.csv", "userId,movieId,rating,timestamp\n"
                                      f"{BIG},{2**62},4.0,1000\n"), "movielens", s)
    assert (res.users_created, res.items_created, res.events_stored) == (1, 1, 1)
    import_events(engine, write(tmp_path, "ev.csv", "user_id,item_id,ts,type,value,event_id\n"
                                "5,242,2024-05-01T10:00:00+02:00,click,,e-1\n5,243,100,,19.5,\n"), "csv", s)
    import_events(engine, write(tmp_path, "ev.jsonl", '{"user_id": 6, "item_id": 242, "ts": 200, "type": 3}\n'),
                  "jsonl", s)
    # then every event is stored with its type (ratings ≥ 4: purchase, else view), value and id
    assert stored_events(engine) == [(196, 242, VIEW, 881250949.0, 3.0, None),
                                     (186, 302, PURCHASE, 891717742.0, 5.0, None),
                                     (BIG, 2**62, PURCHASE, 1000.0, 4.0, None),
                                     (5, 242, CLICK, 1714550400.0, None, "e-1"),
                                     (5, 243, VIEW, 100.0, 19.5, None),
                                     (6, 242, CONTACT, 200.0, None, None)]
    # and the users and items they name exist, created bare
    assert counts(engine) == {"items": 4, "item_categories": 0, "item_attributes": 0, "users": 5, "events": 6}


def test_malformed_rows_are_reported_with_their_lines_and_skipped(setup, tmp_path):
    s, engine = setup
    path = write(tmp_path, "ev.csv", "user_id,item_id,ts,type\n1,2,100,view\nx,2,100,view\n1,2,101,kiss\n"
                                     "1,3,102,click\n")
    res = import_events(engine, path, "csv", s)
    assert [(r.path, r.line) for r in res.report.bad_rows] == [(str(path), 3), (str(path), 4)]
    assert "'kiss'" in res.report.bad_rows[1].reason
    assert (res.report.accepted, res.report.refused, res.events_stored) == (2, 2, 2)
    assert [e[:3] for e in stored_events(engine)] == [(1, 2, VIEW), (1, 3, CLICK)]


def test_the_same_file_imported_twice_stores_nothing_twice(setup, tmp_path):
    s, engine = setup
    # given a log without event ids (one row repeated inside the file) and one with ids (one id twice)
    plain = write(tmp_path, "plain.csv", "user_id,item_id,ts,type\n1,2,100,view\n1,2,100,view\n1,2,100,click\n"
                                         "1,2,101,view\n2,2,100,view\n")
    keyed = write(tmp_path, "keyed.jsonl", '{"user_id": 1, "item_id": 2, "ts": 100, "event_id": "a"}\n'
                                           '{"user_id": 1, "item_id": 2, "ts": 100, "event_id": "b"}\n'
                                           '{"user_id": 1, "item_id": 4, "ts": 200, "event_id": "a"}\n'
                                           '{"user_id": 3, "item_id": 4, "ts": 300, "event_id": "a"}\n'
                                           '{"user_id": 3, "item_id": 4, "ts": 300, "event_id": "api-1"}\n')
    first = import_events(engine, plain, "csv", s)
    record(engine, [NewEvent(3, 2, CLICK, 50.0, "api-1")], s)        # an event the API stored, with its id
    # then the repeated row is stored once, the rows differing in type or ts are distinct events
    assert (first.events_stored, first.duplicates) == (4, 1)
    keyed_first = import_events(engine, keyed, "jsonl", s)
    # and with ids, the user's id decides: user 1's "a" twice is once, "a" and "b" are new though equal to a stored
    # event, user 3's "a" is another event than user 1's, and user 3's "api-1" is known
    assert (keyed_first.events_stored, keyed_first.duplicates) == (3, 2)
    before, rows = counts(engine), stored_events(engine)
    with engine.connect() as conn:
        versions = dict(conn.execute(select(User.id, User.history_version)).all())
    # when both are imported again
    again = [import_events(engine, plain, "csv", s), import_events(engine, keyed, "jsonl", s)]
    # then nothing is stored and no version moves
    assert [(r.events_stored, r.duplicates, len(r.users_affected)) for r in again] == [(0, 5, 0), (0, 5, 0)]
    assert counts(engine) == before and stored_events(engine) == rows
    with engine.connect() as conn:
        assert dict(conn.execute(select(User.id, User.history_version)).all()) == versions


@pytest.mark.parametrize("kind", ["items", "events"])
def test_strict_with_one_bad_row_writes_nothing(setup, tmp_path, kind):
    s, engine = setup
    import_events(engine, write(tmp_path, "seed.csv", "user_id,item_id,ts\n1,1,1\n"), "csv", s)
    before = counts(engine)
    # given a file whose last row is bad (many good rows before it)
    good = "".join(f"{k},{k % 7 + 1},{k}\n" for k in range(1, 2000))
    path = (write(tmp_path, "items.csv", "item_id,categories,price\n" + good + "9,1,-3\n") if kind == "items" else
            write(tmp_path, "ev.csv", "user_id,item_id,ts\n" + good + "9,1,yesterday\n"))
    run = import_items if kind == "items" else import_events
    # when it is imported with strict, 500 rows per transaction: one line naming the row, and nothing written
    with pytest.raises(InvalidInput, match=r"\.csv:2001: "):
        run(engine, path, "csv", s, strict=True, chunk_rows=500)
    assert counts(engine) == before
    # and without strict, the good rows are written
    assert run(engine, path, "csv", s).report.accepted == 1999


def test_events_naming_unknown_items_are_refused_when_items_are_not_created(setup, tmp_path):
    s, engine = setup
    s = dataclasses.replace(s, events_create_items=False)
    import_items(engine, write(tmp_path, "items.csv", "item_id\n1\n2\n"), "csv", s)
    path = write(tmp_path, "ev.csv", "user_id,item_id,ts\n1,1,10\n1,99,11\n2,2,12\n")
    before = counts(engine)
    with pytest.raises(InvalidInput, match=r"ev\.csv:3: unknown item id 99"):
        import_events(engine, path, "csv", s, strict=True, chunk_rows=1)
    assert counts(engine) == before
    res = import_events(engine, path, "csv", s)
    assert [(r.line, r.reason) for r in res.report.bad_rows] == [(3, "unknown item id 99 "
                                                                     "(PREFEED_EVENTS_CREATE_ITEMS=false)")]
    assert (res.report.accepted, res.report.refused, res.events_stored, res.items_created) == (2, 1, 2, 0)
    assert [e[:2] for e in stored_events(engine)] == [(1, 1), (2, 2)]


def test_a_row_in_the_year_5138_is_refused_and_the_log_clock_and_newest_items_stay(setup, tmp_path):
    from precompute.data.catalog import newest_active
    from precompute.data.clock import log_clock

    s, engine = setup
    # given a log whose newest event is at 1000 s and a catalogue whose newest item was created at 2000 s
    import_events(engine, write(tmp_path, "old.csv", "user_id,item_id,ts\n1,2,1000\n"), "csv", s)
    import_items(engine, write(tmp_path, "old_items.csv", "item_id,created_at\n2,2000\n"), "csv", s)
    # when an event log and a catalogue each hold one row dated 5138 (ISO and seconds) among good ones
    it = import_items(engine, write(tmp_path, "it.csv", "item_id,created_at\n3,1500\n4,99990000000\n"), "csv", s)
    ev = import_events(engine, write(tmp_path, "ev.csv", "user_id,item_id,ts\n1,3,1500\n"
                                                         "1,4,5138-07-01T00:00:00Z\n1,5,1600\n"), "csv", s)
    # then those rows are refused with their line and reason, counted, and the rest are stored
    for result, field in ((ev, "ts"), (it, "created_at")):
        assert [(r.line, r.reason.split()[0]) for r in result.report.bad_rows] == [(3, field)], result.report
        assert "after now" in result.report.bad_rows[0].reason and result.report.refused == 1
    assert [e[:2] for e in stored_events(engine)] == [(1, 2), (1, 3), (1, 5)]
    assert ev.events_stored == 2 and it.items_created == 1 and 4 not in catalogue(engine)
    # and the log's clock is still the newest real event, the newest item still the real one
    with engine.connect() as conn:
        assert log_clock(conn, s) == 1600.0
    assert newest_active(engine, 1) == [2]
