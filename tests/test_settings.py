"""One settings object, one error tree, one layout: what the code declares once is what docs/configuration.md, the
CLI and the imports show."""

import ast
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from precompute import errors
from precompute.errors import ConfigError
from precompute.settings import Settings, markdown_table, without_prefeed_config
from tests.conftest import ROOT, manage

PACKAGES = ("api", "cli", "jobs", "precompute", "benchmarks")


def _sources():
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))
    yield ROOT / "manage.py"


def test_the_configuration_page_table_is_the_declared_settings():
    # given the settings table of docs/configuration.md, between its markers
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    table = re.search(r"<!-- settings -->\n(.*?)\n<!-- /settings -->", page, re.S)
    assert table, "docs/configuration.md has no <!-- settings --> table: python manage.py docs"
    # then it is exactly what the code declares
    assert table.group(1).strip() == markdown_table(), "docs/configuration.md is stale: python manage.py docs"


def test_every_setting_round_trips_through_the_environment(tmp_path):
    # given settings where every field differs from its default
    changed = {}
    for f in dataclasses.fields(Settings):
        d = f.default
        if f.metadata["kind"] == "names":
            changed[f.name] = ("alpha", "b_2")
        elif f.metadata["kind"] == "weights":
            changed[f.name] = tuple((f"{name}x", w + 0.5) for name, w in d)
        elif isinstance(d, tuple):
            changed[f.name] = tuple(x + 1 for x in d)
        elif isinstance(d, bool):
            changed[f.name] = not d
        elif d is None or isinstance(d, str):
            changed[f.name] = {"database_url": f"sqlite:///{tmp_path / 'x.db'}", "redis_url": "redis://h:1/2",
                               "admin_token": "t0ken", "train_loss": "YetiRank", "train_labels": "period",
                               "log_level": "DEBUG"}.get(f.name, f"{d}x")
        elif isinstance(d, Path):
            changed[f.name] = tmp_path / f.name
        elif isinstance(d, float):
            changed[f.name] = d / 2 if d else 1.5e9
        else:
            changed[f.name] = d + 1
    s = Settings(**changed)
    assert all(getattr(s, f.name) != f.default for f in dataclasses.fields(Settings))
    # when a child process builds its settings from the environment they produce
    again = Settings.from_env(s.as_env())
    # then it has every one of them
    assert again == s
    # and an environment without prefeed variables gives the declared defaults
    assert Settings.from_env(without_prefeed_config(s.child_env())) == Settings()


@pytest.mark.parametrize("name,value,fragment", [
    ("PREFEED_BATCH_SIZE", "x", "PREFEED_BATCH_SIZE must be an integer"),
    ("PREFEED_BATCH_SIZE", "0", "PREFEED_BATCH_SIZE must be positive"),
    ("PREFEED_RECENCY_DECAY", "1.5", "PREFEED_RECENCY_DECAY must be at most 1.0"),
    ("PREFEED_RECENCY_DECAY", "fast", "PREFEED_RECENCY_DECAY must be a number"),
    ("PREFEED_RETRY_INTERVALS", "5,x", "PREFEED_RETRY_INTERVALS must be comma-separated integers"),
    ("PREFEED_RETRY_INTERVALS", "5,-1", "PREFEED_RETRY_INTERVALS must be at least 0"),
    ("PREFEED_PAGE_LIMIT_DEFAULT", "500", "must not exceed PREFEED_PAGE_LIMIT_MAX"),
    ("PREFEED_DB_POOL_SIZE", "five", "PREFEED_DB_POOL_SIZE must be an integer"),
    ("PREFEED_DB_POOL_SIZE", "0", "PREFEED_DB_POOL_SIZE must be positive"),
    ("PREFEED_DB_MAX_OVERFLOW", "-1", "PREFEED_DB_MAX_OVERFLOW must be at least 0"),
    ("PREFEED_DB_POOL_TIMEOUT", "1.5", "PREFEED_DB_POOL_TIMEOUT must be an integer"),
    ("PREFEED_DB_PREPARED_STATEMENTS", "maybe", "PREFEED_DB_PREPARED_STATEMENTS must be true or false"),
    ("REDIS_URL", "redis://:pass/word@h:6379/0", "REDIS_URL cannot be read: an '@', '/'"),
    ("DATABASE_URL", "postgresql://u:pass@word@h/db", "DATABASE_URL cannot be read: an '@', '/'"),
    ("DATABASE_URL", "postgresql://u@h:54x/db", "DATABASE_URL cannot be read: its port is not a number"),
    ("PREFEED_LOG_LEVEL", "LOUD", "PREFEED_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR, not 'LOUD'"),
    ("PREFEED_WORKER_METRICS_PORT", "70000", "PREFEED_WORKER_METRICS_PORT must be at most 65535"),
])
def test_a_bad_value_is_refused_naming_its_variable(name, value, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        Settings.from_env({name: value})


def _float_settings():
    """Every variable read as floats: (variable, how one non-finite value is written in it)."""
    for f in dataclasses.fields(Settings):
        d = f.default
        if f.metadata["kind"] == "weights":
            yield f.metadata["env"], f"{d[0][0]}:{{}}"
        elif isinstance(d, float) or isinstance(d, tuple) and d and isinstance(d[0], float):
            yield f.metadata["env"], "{}"


@pytest.mark.parametrize("name,template", list(_float_settings()))
@pytest.mark.parametrize("word", ["nan", "inf", "-inf", "NaN", "infinity"])
def test_every_float_setting_refuses_a_value_that_is_not_finite(name, template, word):
    # given a float setting that reads nan or an infinity (float() accepts them; NaN passes every range check)
    assert any(n == "PREFEED_RATE_LIMIT" for n, _ in _float_settings())
    # when the settings are built, then they are refused naming the variable
    with pytest.raises(ConfigError, match=f"^{name} must be a finite number"):
        Settings.from_env({name: template.format(word)})


def test_a_rate_limit_that_is_not_finite_is_one_line_from_the_cli(settings):
    done = manage(settings, "settings", extra_env={"PREFEED_RATE_LIMIT": "nan"})
    assert done.returncode == 2 and done.stderr.strip() == "error: PREFEED_RATE_LIMIT must be a finite number, got nan"


@pytest.mark.parametrize("name,value", [("PREFEED_TRAIN_DEPTH", "deep"), ("PREFEED_DB_POOL_SIZE", "many")])
def test_a_bad_value_is_one_line_from_the_cli(settings, name, value):
    done = manage(settings, "settings", extra_env={name: value})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"error: {name} must be an integer, got '{value}'"


def test_the_settings_command_shows_no_secret(settings):
    # given a token and passwords in both URLs
    secret = dataclasses.replace(settings, admin_token="s3cret-token",
                                 database_url="postgresql+psycopg://app:db-pa55@127.0.0.1:1/x",
                                 redis_url="redis://:redis-pa55@127.0.0.1:1/0")
    done = manage(secret, "settings")
    assert done.returncode == 0, done.stderr
    # then every setting is listed, and none of the secrets
    assert len(done.stdout.splitlines()) == len(dataclasses.fields(Settings))
    for word in ("s3cret-token", "db-pa55", "redis-pa55"):
        assert word not in done.stdout
    assert "PREFEED_ADMIN_TOKEN=(set)" in done.stdout and "app:***@127.0.0.1" in done.stdout


def test_passwords_given_as_url_query_parameters_are_masked_too(settings):
    from precompute.settings.connections import redact_url

    # given passwords as query parameters, as libpq and redis-py accept them
    secret = dataclasses.replace(settings, database_url="postgresql+psycopg://app@127.0.0.1:1/x?password=db-pa55",
                                 feed_redis_url="redis://127.0.0.1:1/0?Password=redis-pa55&db=0")
    # then `settings` masks them, as status, its JSON and the dashboard do (``redact_url``)
    done = manage(secret, "settings")
    assert done.returncode == 0 and "password=***" in done.stdout and "Password=***&db=0" in done.stdout
    shown = done.stdout + str(secret.public()) + redact_url("postgresql://u:db-pa55@h/x?sslpassword=redis-pa55")
    for word in ("db-pa55", "redis-pa55"):
        assert word not in shown
    # and a parameter that only starts like one is left alone
    assert redact_url("redis://h/0?passwordless=1") == "redis://h/0?passwordless=1"


def test_no_module_reads_a_default_around_the_settings_object():
    offenders = [str(p.relative_to(ROOT)) for p in _sources()
                 if p.name != "settings.py" and re.search(r"\bdefaults\.[A-Z_a-z]", p.read_text())]
    assert offenders == []


def _imports(path: Path) -> set[str]:
    """Absolute names of the prefeed modules ``path`` imports (relative imports resolved)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            names |= {module} | {f"{module}.{a.name}" for a in node.names}
    return names


@pytest.mark.parametrize("folder,forbidden", [
    ("precompute", ("flask", "rq", "api", "jobs", "cli")),          # the core runs without Flask or RQ
    ("precompute/data", ("precompute.ranking", "precompute.feeds")),
    ("precompute/feeds", ("precompute.ranking", "precompute.data")),
    # experiments name ranking's bundles and methods; ranking knows nothing of experiments or of the pipeline
    ("precompute/ranking", ("precompute.experiments", "precompute.pipeline", "precompute.learning")),
    ("precompute/experiments", ("precompute.pipeline", "precompute.learning")),
    ("api", ("jobs.tasks", "jobs.worker", "jobs.context", "cli")),  # see the next test
    ("jobs", ("api", "cli")),
])
def test_dependencies_point_one_way(folder, forbidden):
    bad = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n.split(".")[0] in forbidden
                                            or any(n == f or n.startswith(f + ".") for f in forbidden))
           for p in sorted((ROOT / folder).rglob("*.py"))}
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_api_reaches_the_job_side_through_queues_and_status_only():
    # jobs.queues to enqueue; jobs.status for the dashboard's snapshot, which reads RQ's registries and workers
    reached = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n.split(".")[0] == "jobs"
                                                and n.split(".")[:2] not in (["jobs", "queues"], ["jobs", "status"]))
               for p in sorted((ROOT / "api").rglob("*.py"))}
    assert {k: v for k, v in reached.items() if v} == {}


def test_the_core_imports_without_flask_or_rq():
    code = ("import sys, precompute.pipeline.pipeline, precompute.feeds.page, precompute.data.bulk; "
            "print(sorted(m for m in ('flask', 'rq', 'werkzeug') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_manage_py_starts_without_the_ranking_stack():
    # given the CLI as manage.py loads it: commands that rank, train or read bundles import those themselves
    code = "import sys, cli; print(sorted(m for m in ('scipy', 'pandas', 'catboost') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    # then every other command starts without them (they were over a third of its start's CPU time)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_no_module_is_over_300_lines():
    long = {str(p.relative_to(ROOT)): n for p in _sources() if (n := len(p.read_text().splitlines())) > 300}
    assert long == {}


def test_driver_errors_from_raw_cursors_are_database_unavailable_not_bugs():
    # given the errors a raw driver cursor raises (bulk imports, items.ensure), not wrapped by SQLAlchemy
    import sqlite3

    import psycopg

    for exc in (sqlite3.OperationalError("database is locked"), psycopg.OperationalError("deadlock detected")):
        # then they map to the one "database unavailable" error (HTTP 503, one CLI line), like SQLAlchemy's
        mapped = errors.as_prefeed_error(exc)
        assert isinstance(mapped, errors.Unavailable) and mapped.which == "database", exc


def _documented_codes() -> dict[str, tuple[int, int]]:
    """``{class name: (HTTP status, exit code)}`` as the tree in ``precompute/errors.py``'s docstring states them."""
    rows = re.findall(r"[├└]── (\w+) .*?(\d{3})\s+(\d+)$", errors.__doc__, re.M)
    return {name: (int(status), int(code)) for name, status, code in rows}


def _raised(cls: type[errors.PrefeedError]) -> errors.PrefeedError:
    """An instance of ``cls`` as the code raises it."""
    if issubclass(cls, errors.Unavailable):
        return cls("redis")
    if issubclass(cls, errors.TooManyRequests):
        return cls("over the limit", retry_after=3.0)
    return cls(f"a {cls.__name__} happened")


def test_every_error_leaves_the_api_and_the_cli_with_the_status_and_exit_code_its_tree_documents(settings,
                                                                                                  monkeypatch, capsys):
    # given the documented tree, and every class of the one tree
    documented = _documented_codes()
    tree = {name: c for name, c in vars(errors).items()
            if isinstance(c, type) and issubclass(c, errors.PrefeedError) and c is not errors.PrefeedError}
    assert set(documented) == set(tree) and len(tree) >= 9
    # and an API with a route that raises any of them, and a command that does
    import click
    from flask import abort

    from api import create_app
    from cli.group import cli, command, main

    app = create_app(settings, {"TESTING": True})

    def raise_in_route(name):
        if name not in tree:
            abort(404)
        raise _raised(tree[name])

    app.add_url_rule("/raise/<name>", view_func=raise_in_route)
    elsewhere = click.Group()

    @command(elsewhere, name="raise-error")
    @click.argument("name")
    def raise_in_command(name):
        raise _raised(tree[name])

    monkeypatch.setitem(cli.commands, "raise-error", elsewhere.commands["raise-error"])
    for name, (status, code) in documented.items():
        # when the route raises it, then the API answers the documented status with a one-message JSON body
        resp = app.test_client().get(f"/raise/{name}")
        assert resp.status_code == status, name
        assert resp.is_json and isinstance(resp.get_json()["error"], str) and resp.get_json()["error"], name
        # and when the command raises it, manage.py prints one line and exits with the documented code
        monkeypatch.setattr(sys, "argv", ["manage.py", "raise-error", name])
        capsys.readouterr()                                 # (the API's request log line)
        try:
            exit_code = main()
        except SystemExit as done:
            exit_code = done.code
        err = capsys.readouterr().err
        assert exit_code == code, name
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, (name, err)
    # and the app translates them in one place: one handler, for the base class, on the app itself (a handler a
    # blueprint or the app declared for a subclass would answer that class its own way)
    handlers = {(scope, kind) for scope, by_code in app.error_handler_spec.items() for by_kind in by_code.values()
                for kind in by_kind if issubclass(kind, errors.PrefeedError)}
    assert handlers == {(None, errors.PrefeedError)}
