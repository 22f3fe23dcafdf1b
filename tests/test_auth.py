"""API keys, scopes and rate limits (``api/auth.py``, ``precompute/data/api_keys.py``,
``precompute/feeds/limits.py``)."""

import base64
import dataclasses
import hashlib
import json
import logging
import re
import time

from sqlalchemy import func, select

from api import create_app
from api.services import services
from jobs.status import snapshot
from precompute.data import api_keys
from precompute.data.tables import Event, Item
from tests.conftest import manage

PUBLIC = {"/livez", "/healthz"}
#: The scope each route needs (None: any key); a route missing here fails the first test.
SCOPES = {
    ("GET", "/feed/<user_id>"): "feed:read",
    ("GET", "/items/<item_id>/similar"): "feed:read",
    ("POST", "/events"): "events:write",
    ("PUT", "/items/<item_id>"): "items:write",
    ("PATCH", "/items/<item_id>"): "items:write",
    ("POST", "/items"): "items:write",
    ("PUT", "/boosts/<item_id>"): "admin",
    ("DELETE", "/boosts/<item_id>"): "admin",
    ("GET", "/metrics"): "metrics:read",
    ("GET", "/openapi.json"): None,
    ("GET", "/dashboard"): "admin",
    ("GET", "/dashboard/status.json"): "admin",
}


def key(world, name, scopes, **limits) -> str:
    return api_keys.create(world.engine, f"{name}-{time.monotonic_ns()}", frozenset(scopes), **limits)


def routes(app):
    """(method, rule) of every route the app serves, but static files and the RQ panel's own."""
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static" or rule.rule.startswith("/dashboard/rq"):
            continue
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            yield method, rule.rule


def call(client, method, rule, headers, user):
    """``rule`` called for ``user`` (the ``<user_id>`` of its path, the user of an event) and item 1."""
    url = re.sub(r"<[^>]+>", "1", rule.replace("<user_id>", str(user)))
    body = [{"user_id": user, "item_id": 1, "type": "view"}] if rule == "/events" else {"items": []} \
        if rule == "/items" else {"weight": 1.0} if "boosts" in rule else {}
    return client.open(url, method=method, json=None if method in ("GET", "DELETE") else body, headers=headers)


def test_every_route_but_the_probes_needs_a_key_with_its_scope(app, world, user_id):
    client = app.test_client()
    served = set(routes(app))
    # given every route the app serves: each is either a probe or has a declared scope (a new route must say which)
    assert {r for _, r in served} - PUBLIC - {r for _, r in SCOPES} == set()
    holders = {scope: key(world, "holder", [scope]) for scope in api_keys.SCOPES}
    for method, rule in sorted(served):
        if rule in PUBLIC:
            assert call(client, method, rule, {}, user_id).status_code == 200, rule
            continue
        scope = SCOPES[(method, rule)]
        # when called without a key, with an unknown one, with keys of every other scope and with the right one
        no_key = call(client, method, rule, {}, user_id)
        assert no_key.status_code == 401 and no_key.get_json()["error"], (method, rule)
        unknown = call(client, method, rule, {"Authorization": "Bearer pf_not-a-key"}, user_id)
        assert unknown.status_code == (403 if rule.startswith("/dashboard") else 401), (method, rule)
        for other, k in holders.items():
            resp = call(client, method, rule, {"Authorization": f"Bearer {k}"}, user_id)
            if scope is None or other in (scope, "admin"):
                assert resp.status_code not in (401, 403), (method, rule, other, resp.get_json())
            else:
                # then a key without the scope is a 403 that names the scope it lacks
                assert resp.status_code == 403 and scope in resp.get_json()["error"], (method, rule, other)


def test_the_openapi_document_states_each_routes_scope(app):
    # given the scopes the test above holds every route to, and the document the app serves
    spec = services(app).openapi
    for (method, rule), scope in SCOPES.items():
        op = spec["paths"][re.sub(r"<(\w+)>", r"{\1}", rule)][method.lower()]
        # then each route's security names a key with exactly that scope (docs/api.md is rendered from it)
        assert {"key": [scope] if scope else []} in op.get("security", spec["security"]), (method, rule)
    assert spec["paths"]["/livez"]["get"]["security"] == spec["paths"]["/healthz"]["get"]["security"] == []


def test_a_key_without_events_write_stores_nothing(client, world, user_id):
    reader = key(world, "reader", ["feed:read"])
    with world.engine.connect() as conn:
        before = conn.execute(select(func.count()).select_from(Event)).scalar()
    resp = client.post("/events", json=[{"user_id": user_id, "item_id": 5, "type": "view"}],
                       headers={"Authorization": f"Bearer {reader}"})
    assert resp.status_code == 403
    with world.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Event)).scalar() == before


def test_events_naming_unknown_items_create_them_only_for_a_key_with_items_write(client, world, user_id):
    writer = key(world, "writer", ["events:write"])
    unknown = [2_000_000_001, 2_000_000_002]
    batch = [{"user_id": user_id, "item_id": 3, "type": "view"}] + [{"user_id": user_id, "item_id": i, "type": "view"}
                                                                    for i in unknown]

    def stored():
        with world.engine.connect() as conn:
            return (conn.execute(select(func.count()).select_from(Item).where(Item.id.in_(unknown))).scalar(),
                    conn.execute(select(func.count()).select_from(Event).where(Event.user_id == user_id)).scalar())

    before = stored()
    # given a key with events:write only: the batch is refused whole, naming the unknown ids
    resp = client.post("/events", json=batch, headers={"Authorization": f"Bearer {writer}"})
    assert resp.status_code == 404 and all(str(i) in resp.get_json()["error"] for i in unknown)
    assert stored() == before
    # given a key with items:write too (the suite's client): they are created, the events stored
    resp = client.post("/events", json=batch)
    assert resp.status_code == 202 and resp.get_json()["items_created"] == 2
    assert stored() == (2, before[1] + 3)


def test_a_revoked_key_stops_working_within_a_second_on_every_api_process(settings, world, user_id):
    k = key(world, "soon-revoked", ["feed:read"])
    name = next(r["name"] for r in api_keys.listing(world.engine) if r["name"].startswith("soon-revoked"))
    apps = [create_app(settings, {"TESTING": True}) for _ in range(2)]       # two API processes' worth
    clients = [a.test_client() for a in apps]
    headers = {"Authorization": f"Bearer {k}"}
    assert all(c.get(f"/feed/{user_id}", headers=headers).status_code == 200 for c in clients)
    api_keys.revoke(world.engine, name)
    time.sleep(1.05)
    assert all(c.get(f"/feed/{user_id}", headers=headers).status_code == 401 for c in clients)
    for a in apps:
        services(a).engine.dispose()


def test_the_admin_token_is_an_admin_key(client, admin, user_id):
    assert client.get("/dashboard/status.json", headers=admin).status_code == 200
    assert client.get("/metrics", headers=admin).status_code == 200
    assert client.get(f"/feed/{user_id}", headers=admin).status_code == 200


def test_over_a_keys_rate_is_a_429_with_retry_after_shared_by_every_api_process(settings, world, user_id):
    # given a key of 1 request/s with a burst of 3, used through two API processes
    k = key(world, "slow", ["feed:read", "events:write"], rate=1.0, burst=3)
    apps = [create_app(settings, {"TESTING": True}) for _ in range(2)]
    clients = [a.test_client() for a in apps]
    headers = {"Authorization": f"Bearer {k}"}
    # when 3 requests go through one process and 2 through the other
    codes = [clients[0].get(f"/feed/{user_id}", headers=headers).status_code for _ in range(3)]
    refused = clients[1].get(f"/feed/{user_id}", headers=headers)
    # then the burst is shared: the fourth request is refused wherever it lands, with when to come back
    assert codes == [200] * 3 and refused.status_code == 429
    assert refused.get_json()["error"] and 1 <= int(refused.headers["Retry-After"]) <= 2
    # and a refused write stores nothing
    with world.engine.connect() as conn:
        before = conn.execute(select(func.count()).select_from(Event)).scalar()
    resp = clients[1].post("/events", json={"user_id": user_id, "item_id": 3, "type": "view"}, headers=headers)
    assert resp.status_code == 429
    with world.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Event)).scalar() == before
    # and a second later there is room again
    time.sleep(1.05)
    assert clients[0].get(f"/feed/{user_id}", headers=headers).status_code == 200
    for a in apps:
        services(a).engine.dispose()


def test_one_user_id_gets_at_most_its_events_per_minute(settings, world, new_user_ids):
    app = create_app(dataclasses.replace(settings, user_events_per_minute=5), {"TESTING": True})
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {world.key}"

    def count(uid):
        with world.engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(Event).where(Event.user_id == uid)).scalar()

    bot, other = new_user_ids(2)
    # given a bot writing events for one user id: 4 are accepted, then a batch of 2 would pass the 5 per minute
    assert client.post("/events", json=[{"user_id": bot, "item_id": 3, "type": "view"}] * 4).status_code == 202
    resp = client.post("/events", json=[{"user_id": bot, "item_id": 4, "type": "view"},
                                        {"user_id": other, "item_id": 4, "type": "view"}] * 2)
    # then the whole batch is refused (the other user's events too: nothing half-written), with Retry-After
    assert resp.status_code == 429 and int(resp.headers["Retry-After"]) >= 1
    assert (count(bot), count(other)) == (4, 0)
    # and another user id is not held back by the bot
    assert client.post("/events", json={"user_id": other, "item_id": 4, "type": "view"}).status_code == 202
    services(app).engine.dispose()


def test_auth_off_opens_the_data_routes_only_and_says_so(settings, world, caplog, user_id):
    with caplog.at_level(logging.WARNING):
        app = create_app(dataclasses.replace(settings, auth=False), {"TESTING": True})
    assert "PREFEED_AUTH=off" in caplog.text
    client = app.test_client()
    assert client.get(f"/feed/{user_id}").status_code == 200
    assert client.post("/events", json={"user_id": user_id, "item_id": 3, "type": "view"}).status_code == 202
    assert client.put("/boosts/1", json={"weight": 1.0}).status_code == 401
    assert client.get("/metrics").status_code == 401
    services(app).engine.dispose()


def test_no_key_hash_or_token_appears_in_logs_bodies_status_dashboard_or_metrics(settings, world, admin, r,
                                                                                  capfd, caplog, user_id):
    k = key(world, "secretive", ["feed:read", "events:write", "metrics:read"])
    secrets_ = [k, hashlib.sha256(k.encode()).hexdigest(), "test-admin-token-0123456789abcdef", world.key]
    app = create_app(settings, {"TESTING": True})
    client = app.test_client()
    seen = []
    with caplog.at_level(logging.DEBUG):
        for headers in ({"Authorization": f"Bearer {k}"}, {"Authorization": f"Bearer {k}x"}, admin,
                        {"Authorization": "Basic " + base64.b64encode(f"u:{k}".encode()).decode()}):
            for method, url, body in (("GET", f"/feed/{user_id}", None), ("POST", "/events", {"user_id": user_id}),
                                      ("PUT", "/boosts/1", {"weight": 1.0}), ("GET", "/metrics", None),
                                      ("GET", "/dashboard", None), ("GET", "/dashboard/status.json", None)):
                resp = client.open(url, method=method, json=body, headers=headers)
                seen.append(resp.get_data(as_text=True))
                seen.append(str(dict(resp.headers)))
    seen.append(str(snapshot(settings, world.engine, r, r)))
    done = manage(settings, "keys", "list")
    seen += [done.stdout, done.stderr, manage(settings, "status").stdout]
    out = capfd.readouterr()
    seen += [out.out, out.err, caplog.text]
    for text in seen:
        for s in secrets_:
            assert s not in text
    services(app).engine.dispose()


def test_keys_on_the_command_line(settings):
    # create prints the key once, on stdout; list shows names and scopes, never a key or a hash
    done = manage(settings, "keys", "create", "cli-shop", "--scopes", "feed:read,events:write", "--rate", "20")
    assert done.returncode == 0 and re.fullmatch(r"pf_[A-Za-z0-9_-]{43}\n", done.stdout), done.stderr
    k = done.stdout.strip()
    listed = manage(settings, "keys", "list", "--json")
    row = next(x for x in json.loads(listed.stdout) if x["name"] == "cli-shop")
    assert row["scopes"] == "events:write,feed:read" and row["rate"] == 20 and row["revoked_at"] is None
    assert k not in listed.stdout and hashlib.sha256(k.encode()).hexdigest() not in listed.stdout
    # a taken name, an unknown scope and revoking twice are one line each, exit 2
    for args in (("create", "cli-shop", "--scopes", "feed:read"), ("create", "x", "--scopes", "feed:reed")):
        bad = manage(settings, "keys", *args)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: "), args
    assert manage(settings, "keys", "revoke", "cli-shop").returncode == 0
    again = manage(settings, "keys", "revoke", "cli-shop")
    assert again.returncode == 2 and "no active key" in again.stderr


def test_process_shares_of_a_key_budget_never_let_more_through_than_the_budget(r, settings):
    from precompute.feeds.limits import Bucket, Limiter

    # given two API processes' limiters on one bucket of 5 requests/s with a burst of 100
    bucket = Bucket(f"{settings.key_prefix}rate:key:shared", rate=5.0, burst=100)
    processes = [Limiter(r), Limiter(r)]
    # when 400 requests arrive as fast as they can, alternating between the processes
    t0 = time.monotonic()
    admitted = sum(processes[k % 2].take_one(bucket) == 0 for k in range(400))
    elapsed = time.monotonic() - t0
    # then no more than the burst and what refilled meanwhile got through, and at most each process's unspent share
    # less
    assert admitted <= 100 + 5 * elapsed + 1
    assert admitted >= 100 - 2 * Limiter.SHARE



def test_a_busy_process_claims_larger_shares_and_a_quiet_one_the_first_size(r, settings):
    from precompute.feeds.limits import Bucket, Limiter

    # given a key with room for everything, and one process's limiter counting its round trips to the bucket
    bucket = Bucket(f"{settings.key_prefix}rate:key:busy", rate=1e6, burst=10**6)
    limiter = Limiter(r)
    claims = []
    claim = limiter._claim
    limiter._claim = lambda keys, args: (claims.append(int(args[2])), claim(keys=keys, args=args))[1]
    # when it lets 2,000 requests through as fast as it can
    assert all(limiter.take_one(bucket) == 0 for _ in range(2000))
    # then it claimed its first share, then larger ones, up to SHARE_MAX: far fewer round trips than one per SHARE
    assert claims[0] == Limiter.SHARE and max(claims) == Limiter.SHARE_MAX
    assert len(claims) <= 2000 // Limiter.SHARE_MAX + 3
    # and a process that spends its share slower than it expires claims the first size again
    claims.clear()
    quiet = Bucket(f"{settings.key_prefix}rate:key:quiet", rate=1e6, burst=10**6)
    for _ in range(2):
        limiter.take_one(quiet)
        time.sleep(Limiter.SHARE_SECONDS)
    assert claims == [Limiter.SHARE, Limiter.SHARE]

def queries_on(engine) -> list[str]:
    """The SQL statements ``engine`` runs from now on, as a list that grows (for counting)."""
    from sqlalchemy import event

    ran: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda conn, cursor, statement, *rest: ran.append(statement))
    return ran


def test_a_malformed_key_is_refused_before_any_database_query(settings, world, admin, user_id):
    # (this address fails 420 times: past the failures an address may make, tests/test_address_limits.py)
    app = create_app(dataclasses.replace(settings, auth_failures_burst=1000), {"TESTING": True})
    client = app.test_client()
    ran = queries_on(services(app).engine)
    shaped = "pf_" + "A" * 43
    # given bearer values that are not of a key's shape: short, long, the wrong prefix or alphabet, odd bytes
    malformed = ["wrong", "pf_", shaped[:-1], shaped + "A", "px_" + "A" * 43, "pf_" + "A" * 42 + "=",
                 "pf_" + "A" * 42 + "é", "pf_" + "A" * 42 + "/", world.key.upper(), "x" * 8000,
                 *(f"made-up-{i}" for i in range(200))]
    # when each is presented to a route that needs a key, as a bearer token and as the dashboard's password
    for value in malformed:
        assert client.get(f"/feed/{user_id}", headers={"Authorization": f"Bearer {value}"}).status_code == 401
        basic = base64.b64encode(f"admin:{value}".encode()).decode()
        assert client.get("/dashboard/status.json", headers={"Authorization": f"Basic {basic}"}).status_code == 403
    # then not one reached the database
    assert ran == []
    # and a well-formed unknown key costs one read, while the admin token is still accepted without one
    assert client.get(f"/feed/{user_id}", headers={"Authorization": f"Bearer {shaped}"}).status_code == 401
    assert len(ran) == 1
    assert client.get(f"/feed/{user_id}", headers=admin).status_code == 200
    assert sum("api_keys" in statement for statement in ran) == 1
    services(app).engine.dispose()


def test_unknown_keys_never_push_a_known_key_out_and_cost_one_read_each(app, settings, world):
    import secrets

    from api.keyring import Keyring

    engine = services(app).engine
    ring = Keyring(engine, settings, ttl=60.0, max_entries=50, unknown_ttl=60.0, max_unknown=50)
    valid = key(world, "remembered", ["feed:read"])
    assert ring.find(valid) is not None
    # given more distinct well-formed unknown keys than the unknown table holds (and than the known one holds)
    unknown = [api_keys.PREFIX + secrets.token_urlsafe(32) for _ in range(60)]
    assert all(ring.find(u) is None for u in unknown)
    ran = queries_on(engine)
    # when the valid key is used again, then it is still known: no query
    assert ring.find(valid) is not None and ran == []
    # and an unknown key presented again within its time costs nothing, while the oldest, pushed out, is read again
    assert ring.find(unknown[-1]) is None and ran == []
    assert ring.find(unknown[0]) is None and len(ran) == 1
    engine.dispose()


def test_serve_refuses_a_short_admin_token(settings):
    # given an admin token under 32 characters
    done = manage(settings, "serve", "--port", "1", extra_env={"PREFEED_ADMIN_TOKEN": "x" * 31}, timeout=30)
    # then serve stops at once with one line and exit 2, naming the variable but never the token
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert "PREFEED_ADMIN_TOKEN" in done.stderr and "x" * 31 not in done.stderr


def test_no_key_takes_the_admin_tokens_name(settings):
    for name in (api_keys.ADMIN_NAME, api_keys.ADMIN_NAME.lower()):
        # when a key is created under the name the admin token acts under (in any case)
        done = manage(settings, "keys", "create", name, "--scopes", "feed:read")
        # then it is one line, exit 2, and nothing is stored
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
        assert done.stdout == ""
    listed = json.loads(manage(settings, "keys", "list", "--json").stdout)
    assert not any(row["name"].upper() == api_keys.ADMIN_NAME for row in listed)
