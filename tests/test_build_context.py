"""What ``docker build`` puts in the image (the Dockerfile's ``COPY . .`` takes the whole build context): the code,
never the secrets an operator keeps beside the compose file. The context is listed with Docker's own
``.dockerignore`` rules (``tests/dockerignore.py``), no daemon needed."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import ROOT
from tests.dockerignore import DockerIgnore, context

# What an operator puts beside the compose file: its .env and a variant, Prometheus's key, a TLS key pair
SECRETS = [".env", ".env.production", "deploy/.env", "deploy/prometheus/api-key", "deploy/nginx/certs/privkey.pem",
           "certs/tls.key"]


@pytest.mark.parametrize("patterns, path, excluded", [
    # the examples of Docker's reference for .dockerignore
    (["*/temp*"], "somedir/temporary.txt", True),
    (["*/temp*"], "somedir/temp/file", True),
    (["*/temp*"], "temporary.txt", False),
    (["*/*/temp*"], "somedir/subdir/temporary.txt", True),
    (["temp?"], "tempa", True),
    (["temp?"], "somedir/tempa", False),
    (["**/*.go"], "main.go", True),
    (["**/*.go"], "cmd/tool/main.go", True),
    (["*.md", "!README.md"], "CHANGES.md", True),
    (["*.md", "!README.md"], "README.md", False),
    (["*.md", "!README*.md", "README-secret.md"], "README-secret.md", True),
    (["*.md", "!README*.md", "README-secret.md"], "README-public.md", False),
    (["*.md", "README-secret.md", "!README*.md"], "README-secret.md", False),
    (["/foo/bar"], "foo/bar", True),
    (["foo/bar"], "foo/bar/baz", True),
    (["foo/bar"], "x/foo/bar", False),
    # and edges of Docker's matcher: its kinds of pattern, exact, prefix, suffix and regex
    (["**/.env"], ".env", True),
    (["**/.env"], "deploy/.env", True),
    (["**/.env"], "deploy/x.env", False),
    (["**/dir"], "dir/file", True),
    (["dir/**"], "dir", False),
    (["dir/**"], "dir/a/b", True),
    (["a**/*.txt"], "a/dir/file.txt", True),
    (["a/*.txt"], "a/dir/file.txt", False),
    ([".*"], ".foo", True),
    ([".*"], "foo", False),
    (["abc.def"], "abcZdef", False),
    (["abc?def"], "abcZdef", True),
    (["a[^b-d]e"], "aze", True),
    (["a\\*b"], "a*b", True),
    (["a\\*b"], "ab", False),
    (["**", "!util/docker/web"], "util/docker/web/foo", False),
    (["docs", "!docs/README.md"], "docs/README.md", False),
    (["# a comment", "", "  var  "], "var/prefeed.db", True),
])
def test_the_matcher_reads_patterns_as_docker_does(patterns, path, excluded):
    assert DockerIgnore("\n".join(patterns)).excludes(path) is excluded


def test_the_build_context_leaves_out_the_operators_secrets(tmp_path):
    # given a checkout's .dockerignore, and beside the code the secrets an operator keeps there
    shutil.copy(ROOT / ".dockerignore", tmp_path)
    code = ["manage.py", "requirements.txt", "Dockerfile", "precompute/settings/__init__.py", "api/feed.py",
            "deploy/nginx/prefeed.conf", "deploy/prometheus/prometheus.yml"]
    for name in [*code, *SECRETS]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    # when docker build lists the context, then the code is in it and no secret is
    assert context(tmp_path) == {".dockerignore", *code}


def test_the_build_context_of_this_checkout_holds_what_the_image_runs():
    # given this checkout, when docker build lists its context
    files = context(ROOT)
    # then what the Dockerfile installs and runs is in it: requirements.txt, manage.py and every package's modules
    modules = {p.relative_to(ROOT).as_posix() for package in ("api", "cli", "jobs", "precompute")
               for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts}
    assert {"requirements.txt", "manage.py"} <= files and modules <= files
    # and no secret, the virtualenv, git's objects nor local state
    assert not files & set(SECRETS)
    assert not any(f.split("/")[0] in (".venv", ".git", "var") or "__pycache__" in f for f in files)
