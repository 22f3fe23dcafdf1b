"""The suite through a PgBouncer in transaction mode: ``python -m tests.through_pgbouncer [pytest args]``
(``make test-pgbouncer``).

Starts a private ``pgbouncer`` (a temporary ``pgbouncer.ini``, a free port on 127.0.0.1, in the foreground; as
``nobody`` when run as root, which PgBouncer refuses to run as) in front of the server of
``PREFEED_TEST_DATABASE_URL`` (default the local PostgreSQL), runs pytest with ``PREFEED_TEST_DATABASE_URL``
pointing at the bouncer, stops it, and exits with pytest's status.

Anything prefeed kept in a session from one transaction to the next (a prepared statement, a temporary table, a
``SET``) works through a bouncer only while no other client takes that server connection in between, so it would
fail now and then under load, and rarely in a test. Here it fails every time: the bouncer runs ``DISCARD ALL``
after every transaction, and hands out server connections round robin (at least three per database).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import make_url

DEFAULT_SERVER = "postgresql://root@127.0.0.1:5432/test"

INI = """[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {auth_file}
pool_mode = transaction
server_reset_query = DISCARD ALL
server_reset_query_always = 1
server_round_robin = 1
min_pool_size = 3
default_pool_size = 10
max_client_conn = 500
"""


def main(pytest_args: list[str]) -> int:
    binary = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")
    if not binary:
        print("error: pgbouncer is not installed (Debian: apt-get install pgbouncer)", file=sys.stderr)
        return 2
    server = make_url(os.environ.get("PREFEED_TEST_DATABASE_URL") or DEFAULT_SERVER)
    listen = _free_port()
    with tempfile.TemporaryDirectory(prefix="prefeed-pgbouncer-") as tmp:
        folder = Path(tmp)
        folder.chmod(0o755)                     # readable by the unprivileged user pgbouncer switches to
        auth_file = folder / "users.txt"
        auth_file.write_text(f'"{server.username}" "{server.password or ""}"\n')
        ini = folder / "pgbouncer.ini"
        ini.write_text(INI.format(host=server.host or "127.0.0.1", port=server.port or 5432, listen=listen,
                                  auth_file=auth_file))
        log = folder / "pgbouncer.log"
        user = ["-u", "nobody"] if os.geteuid() == 0 else []
        with log.open("wb") as out:
            bouncer = subprocess.Popen([binary, *user, str(ini)], stdout=out, stderr=subprocess.STDOUT)
        try:
            if not _answers(listen, bouncer):
                print(f"error: pgbouncer did not start:\n{log.read_text()}", file=sys.stderr)
                return 2
            url = server.set(port=listen, host="127.0.0.1").render_as_string(hide_password=False)
            print(f"--- the suite through PgBouncer (transaction mode) on 127.0.0.1:{listen} in front of "
                  f"{server.host}:{server.port or 5432}", flush=True)
            env = {**os.environ, "PREFEED_TEST_DATABASE_URL": url}
            return subprocess.call([sys.executable, "-m", "pytest", *pytest_args], env=env)
        finally:
            bouncer.terminate()
            bouncer.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int, bouncer: subprocess.Popen, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and bouncer.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["-q"]))
