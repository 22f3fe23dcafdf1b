"""The reference pages generated from the code (docs/configuration.md, docs/api.md, docs/commands.md) are what the
code renders now, whatever the environment; a setting, route or command added without `python manage.py docs`
fails here."""

import dataclasses
import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from api import openapi, reference as api_reference
from cli import cli, docs, reference as cli_reference
from precompute.settings import Settings, markdown_table
from precompute.settings.environment import markdown_table as settings_table, setting
from tests.conftest import ROOT


@pytest.mark.parametrize("page", ["docs/configuration.md", "docs/api.md", "docs/commands.md"])
def test_each_generated_page_is_what_the_code_renders_now(page):
    # given the page as committed and the page as the code renders it
    on_disk = (ROOT / page).read_text(encoding="utf-8") if (ROOT / page).is_file() else None
    rendered = docs.pages()[page]
    # then they are the same
    assert on_disk == rendered, f"{page} is stale: python manage.py docs"


def test_the_pages_do_not_depend_on_the_environment_they_are_built_in():
    # given an environment whose settings change the API's limits and the declared attributes and event types
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFEED_")}
    env.update(PREFEED_PAGE_LIMIT_MAX="50", PREFEED_PAGE_LIMIT_DEFAULT="10", PREFEED_ITEM_ATTRIBUTES="quality",
               PREFEED_EVENT_TYPES="view:1,buy:3", PREFEED_EVENTS_BATCH_MAX="7")
    # when the pages are checked there
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "docs", "--check"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    # then they are still up to date: they are rendered with the default settings
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3 pages up to date"


def test_the_api_page_is_rendered_from_the_document_the_app_serves(client, settings):
    # given the document an app serves at /openapi.json
    served = client.get("/openapi.json").json
    # then it is the one the page's renderer reads, for the same settings
    assert served == openapi.spec(settings)


def test_a_new_setting_changes_the_configuration_table():
    # given the settings with one more declared
    @dataclasses.dataclass(frozen=True)
    class More(Settings):
        dummy: int = setting(3, "PREFEED_DUMMY", "a setting the page does not know yet", unit="s")

    # then the table differs from the one on the page, and names the new variable
    assert settings_table(More) != markdown_table()
    assert "| `PREFEED_DUMMY` | `3` | s | a setting the page does not know yet |" in settings_table(More)


def test_a_new_route_changes_the_api_page():
    # given the served document with one more route
    doc = openapi.spec(Settings())
    doc["paths"]["/dummy/{item_id}"] = {"get": {
        "summary": "A route the page does not know yet", "security": [{"key": ["feed:read"]}],
        "parameters": [{"name": "item_id", "in": "path", "required": True, "schema": {"type": "integer"}}],
        "responses": {"200": {"description": "ok"}, "404": {"description": "no such item"}}}}
    # when it is rendered
    page = api_reference.markdown(doc)
    # then the route has its section: summary, scope, parameter and statuses
    section = page.split("## GET /dummy/{item_id}\n", 1)[1].split("\n## ", 1)[0]
    assert "A route the page does not know yet" in section
    assert "Authentication: `key` with scope `feed:read`." in section
    assert "| `item_id` | path | integer | yes |  |" in section
    assert "| 200 | ok |  |" in section and "| 404 | no such item |  |" in section
    assert page != api_reference.markdown(openapi.spec(Settings()))


def test_a_new_command_changes_the_commands_page():
    # given a group with one more command, with an option and a default
    group = click.Group("manage.py", commands=dict(cli.commands), callback=cli.callback, params=cli.params,
                        help=cli.help)

    @group.command(name="dummy")
    @click.option("--times", type=int, default=2, help="How often.")
    def dummy(times: int) -> None:
        """A command the page does not know yet."""

    # when it is rendered
    page = cli_reference.markdown(group, "manage.py")
    # then it is listed and has its section: usage, help and the option with its default
    assert "| [`dummy`](#managepy-dummy) | A command the page does not know yet. |" in page
    section = page.split("## manage.py dummy\n", 1)[1]
    assert "manage.py dummy [OPTIONS]" in section and "A command the page does not know yet." in section
    assert "| `--times INTEGER` | How often.  [default: 2] |" in section
    assert page != cli_reference.markdown(cli, "manage.py")


def test_docs_writes_the_pages_and_check_names_a_stale_one(tmp_path, monkeypatch):
    # given an empty tree to write the pages into
    monkeypatch.setattr(docs, "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    runner = CliRunner()
    # when the pages are written, then checked
    written = runner.invoke(docs.docs, [])
    assert written.exit_code == 0, written.output
    assert sorted(written.stdout.split("\n")[:3]) == ["wrote docs/api.md", "wrote docs/commands.md",
                                                      "wrote docs/configuration.md"]
    assert runner.invoke(docs.docs, ["--check"]).exit_code == 0
    # and one of them is edited by hand
    page = tmp_path / "docs" / "api.md"
    page.write_text(page.read_text() + "\nan edit\n")
    checked = runner.invoke(docs.docs, ["--check"])
    # then the check fails with one line naming it, and writes nothing
    assert checked.exit_code == 1
    assert checked.stderr == "error: docs/api.md is stale: python manage.py docs\n"
    assert page.read_text().endswith("an edit\n")
