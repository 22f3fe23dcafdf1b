"""Ids are any positive 64-bit integers, sparse: from the database through training, precompute, the page script
and the API, items and users above 2**53 (where doubles, Lua's only numbers, cannot tell neighbours apart) keep
their exact ids."""

import dataclasses
import os
import time

import numpy as np
import pytest
from sqlalchemy import text

from api import create_app
from api.services import services
from precompute.data import bulk, engine as db, synthetic
from precompute.learning.fit import fit_ranker
from precompute.ranking import bundle
from precompute.pipeline.pipeline import Pipeline
from tests.conftest import own_database, with_key

BASE = 2**62                  # item ids BASE + 3k and BASE + 3k + 1 differ by less than a double's spacing there


@pytest.fixture
def own_url(tmp_path_factory):
    yield from own_database(tmp_path_factory, "ids")


def test_items_and_users_above_2_53_keep_their_exact_ids_end_to_end(settings, r, own_url, tmp_path, admin):
    # given a marketplace whose item ids are BASE + 3k (consecutive ones 3 apart, above 2**62) and user ids BASE + k
    s = dataclasses.replace(settings, database_url=own_url, model_dir=tmp_path / "models")
    m = synthetic.generate(200, 500, 20_000, seed=11, now=time.time())
    m = dataclasses.replace(m, item_id=BASE + 3 * m.item_id, event_item=BASE + 3 * m.event_item,
                            user_id=BASE + m.user_id, event_user=BASE + m.event_user)
    engine = db.make_engine(s.database_url)
    db.init_db(engine)
    bulk.load(engine, m, s)
    # when a model is trained on it and every user's feed is precomputed
    result = fit_ranker(engine, s, iterations=10, users=200)
    bundle.promote(s.model_dir, bundle.write(s.model_dir, result.model, result.pairs, {"metrics": result.metrics}))
    pipeline = Pipeline(s, engine, r)
    pipeline.load()
    users = m.user_id.tolist()
    assert pipeline.recompute(users).written == len(users)
    # then feeds hold the catalogue's exact ids
    user = users[0]
    stored = pipeline.store.read(user).items.tolist()
    assert stored and set(stored) <= set(m.item_id.tolist())
    app = create_app(s, {"TESTING": True})
    client = with_key(app.test_client())

    def page(limit=20):
        body = client.get(f"/feed/{user}?limit={limit}").get_json()
        assert body["source"] == "precomputed", body
        return [i["item_id"] for i in body["items"]], [i["item_id"] for i in body["items"] if i["boosted"]]

    ids, _ = page()
    assert ids == stored[:20]
    # and deactivating an item drops exactly it (not a neighbour a double would confuse it with)
    sold = ids[0]
    assert client.patch(f"/items/{sold}", json={"active": False}, headers=admin).status_code == 200
    ids, _ = page()
    assert sold not in ids and ids == [i for i in stored if i != sold][:20]
    # and a boost on an item far down the feed lifts exactly it
    lifted = stored[60]
    assert client.put(f"/boosts/{lifted}", json={"weight": 5.0}, headers=admin).status_code == 200
    ids, boosted = page(limit=40)
    assert boosted == [lifted] and lifted in ids[:5]
    # and an item the user interacts with after the feed was computed leaves it, exactly
    clicked = ids[1] if ids[1] != lifted else ids[2]
    assert client.post("/events", json={"user_id": user, "item_id": clicked, "type": "click",
                                        "ts": time.time()}).status_code in (200, 201, 202)
    ids, _ = page(limit=40)
    assert clicked not in ids and {clicked - 3, clicked + 3} & set(stored[:60]) <= set(ids) | {sold, lifted}
    services(app).engine.dispose()
    engine.dispose()


ID_COLUMNS = [("items", "id"), ("users", "id"), ("events", "user_id"), ("events", "item_id")]


@pytest.mark.skipif(not os.environ.get("PREFEED_TEST_DATABASE_URL"), reason="PostgreSQL only (SQLite ids are 64-bit)")
def test_init_db_widens_32_bit_id_columns_on_postgresql(own_url):
    # given a PostgreSQL database whose id columns an earlier version created as 32-bit integers
    from precompute.data.tables import Base

    engine = db.make_engine(own_url)
    Base.metadata.create_all(engine)
    with engine.begin() as conn:
        for table, column in ID_COLUMNS:
            conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE integer"))
    # when init-db brings it up to date (twice: idempotent)
    db.init_db(engine)
    db.init_db(engine)
    # then every id column is 64-bit
    with engine.connect() as conn:
        for table, column in ID_COLUMNS:
            kind = conn.execute(text("SELECT data_type FROM information_schema.columns WHERE table_name = :t "
                                     "AND column_name = :c AND table_schema = current_schema()"),
                                {"t": table, "c": column}).scalar()
            assert kind == "bigint", (table, column, kind)
    engine.dispose()
