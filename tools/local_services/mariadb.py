"""A throwaway MariaDB (Debian's binaries): Neutron's database (its migrations run on
MySQL/MariaDB only; on SQLite and PostgreSQL they fail).

Its data directory is made by `mariadb-install-db` in a directory of its own under the
system's temp dir (the `mysql` user must reach it: pytest's and mkdtemp's run directories
are root-only, as for PostgresServer), with its unix socket there; it listens on 127.0.0.1
and a free port. `mariadbd` runs in the foreground as our child (it drops to `mysql`
itself; no fork, so its pid is the one we stop), and the whole directory is removed when it
stops. Only root on this machine reaches its `root` (unix_socket authentication, over the
socket); clients use a user with a password of their own (`ensure_database`).

Tuned for a test's database, not for keeping data: no fsync, no doublewrite, small logs
and buffer pool (a start and a Neutron schema's load each take about half a second).
"""

from __future__ import annotations

import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from etcd_compute.errors import ServiceUnavailable
from tools.local_services.process import Service, free_port, wait_until

MARIADBD = Path("/usr/sbin/mariadbd")
# The server's options, also given to mariadb-install-db (its InnoDB files are made by them).
OPTIONS = [
    "--no-defaults",  # no /etc/mysql: the machine's MariaDB config is not ours
    "--skip-name-resolve",
    # As Debian's own config (50-server.cnf) has it: the compiled-in default is latin1.
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_general_ci",
    # Small caches: Neutron's database is a few hundred KB. Aria's page cache and MyISAM's
    # key buffer (128 MB each by default; only the system tables use those engines) and a
    # 16 MB buffer pool: 65 MB of RSS instead of 106 MB, loaded with Neutron's schema.
    "--innodb-buffer-pool-size=16M",
    "--aria-pagecache-buffer-size=1M",
    "--key-buffer-size=1M",
    "--innodb-log-file-size=8M",
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-flush-method=nosync",
    "--innodb-doublewrite=0",
]
# A name a database or user of ours may have (they go into SQL unquoted otherwise).
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def version() -> str:
    """`mariadbd --version` (what a prepared dump's template is keyed by)."""
    done = subprocess.run([str(MARIADBD), "--version"], capture_output=True, text=True,
                          check=False)
    return done.stdout.strip()


class MariaDBServer(Service):
    """One mariadbd on 127.0.0.1; `ensure_database` gives a client its database and user."""

    @classmethod
    def create(cls, run_dir: Path, port: int | None = None) -> MariaDBServer:
        return cls("mariadb", run_dir, port or free_port())

    @property
    def home(self) -> Path:
        """The data directory's parent, with the socket (made by `start`)."""
        return Path(self.extra["home"])

    @property
    def socket(self) -> Path:
        return self.home / "mysqld.sock"

    def url(self, database: str, user: str, password: str) -> str:
        """An SQLAlchemy URL through PyMySQL (what OpenStack services are configured with)."""
        return f"mysql+pymysql://{user}:{password}@127.0.0.1:{self.port}/{database}"

    def start(self) -> MariaDBServer:
        if not MARIADBD.exists() or shutil.which("mariadb-install-db") is None:
            raise ServiceUnavailable("MariaDB is not installed; run: make install")
        try:
            pwd.getpwnam("mysql")
        except KeyError:
            raise ServiceUnavailable("no mysql user (mariadb-server makes it); "
                                     "run: make install") from None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.start_on_a_free_port(self._start_once)
        return self

    def _start_once(self) -> None:
        """A data directory (a new one after a failed attempt: `stop` removed it), then
        mariadbd on it until it answers."""
        if "home" not in self.extra:
            self.extra["home"] = tempfile.mkdtemp(prefix="etcd-compute-mariadb-")
            self.home.chmod(0o755)
            shutil.chown(self.home, "mysql")
        data = self.home / "data"
        # Its temporary tables in a directory of its own, not the machine's /tmp: in ci-52
        # mariadb-install-db aborted because its '/tmp/#sql-temptable-...' file was gone.
        scratch = self.home / "tmp"
        if not scratch.exists():
            scratch.mkdir(mode=0o700)
            shutil.chown(scratch, "mysql")
        if not data.exists():
            with open(self.log_path, "ab") as log:
                done = subprocess.run(
                    ["mariadb-install-db", *OPTIONS, f"--tmpdir={scratch}", f"--datadir={data}",
                     "--user=mysql",
                     # root only over the socket, as the machine's root: no password to leak.
                     "--auth-root-authentication-method=socket", "--skip-test-db"],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
            if done.returncode:
                raise self._fail(f"mariadb-install-db failed (exit {done.returncode})")
        self._spawn([str(MARIADBD), *OPTIONS, f"--tmpdir={scratch}", f"--datadir={data}",
                     f"--socket={self.socket}",
                     f"--pid-file={self.home / 'mariadbd.pid'}", "--user=mysql",
                     "--bind-address=127.0.0.1", f"--port={self.port}"])

        def ready() -> bool:
            # The socket is made after the TCP port is bound (a taken port: it exits).
            if not self.running():
                raise self._fail("mariadbd exited at start")
            return self.socket.exists() and self._sql("SELECT 1", check=False).returncode == 0

        try:
            wait_until(ready, 60, "MariaDB")
        except ServiceUnavailable as exc:
            raise self._fail(str(exc)) from None

    def _sql(self, statements: str, database: str | None = None, check: bool = True,
             stdin: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run SQL as root over the socket (`statements`, or the file `stdin`)."""
        argv = ["mariadb", "--no-defaults", f"--socket={self.socket}", "-uroot", "--batch",
                "--skip-column-names"]
        if statements:
            argv += ["-e", statements]
        if database:
            argv.append(database)
        if stdin is not None:
            with open(stdin) as handle:
                done = subprocess.run(argv, stdin=handle, capture_output=True, text=True,
                                      check=False)
        else:
            done = subprocess.run(argv, capture_output=True, text=True, check=False,
                                  stdin=subprocess.DEVNULL)
        if check and done.returncode:
            raise ServiceUnavailable(f"MariaDB: {done.stderr.strip()[-300:]}")
        return done

    def ensure_database(self, database: str, user: str, password: str) -> bool:
        """`database` and `user` (on 127.0.0.1, with `password`, all privileges on it) made
        if missing; the user's password set either way. True: the database is new."""
        for name in (database, user):
            if not NAME.match(name):
                raise ValueError(f"not a plain SQL name: {name!r}")
        quoted = password.replace("\\", "\\\\").replace("'", "\\'")
        new = not self._sql(f"SHOW DATABASES LIKE '{database}'").stdout.strip()
        self._sql(f"CREATE DATABASE IF NOT EXISTS {database}; "
                  f"CREATE USER IF NOT EXISTS '{user}'@'127.0.0.1'; "
                  f"ALTER USER '{user}'@'127.0.0.1' IDENTIFIED BY '{quoted}'; "
                  f"GRANT ALL PRIVILEGES ON {database}.* TO '{user}'@'127.0.0.1'")
        return new

    def drop_database(self, database: str) -> None:
        if not NAME.match(database):
            raise ValueError(f"not a plain SQL name: {database!r}")
        self._sql(f"DROP DATABASE IF EXISTS {database}")

    def load(self, database: str, dump: Path) -> None:
        """Run the SQL file `dump` (a `dump` of another database) in `database`."""
        self._sql("", database, stdin=dump)

    def dump(self, database: str, path: Path) -> None:
        """`database`'s tables and rows as SQL, without its name (for `load` into another),
        comments or the date (the same database, the same text)."""
        with open(path, "w") as out:
            done = subprocess.run(
                ["mariadb-dump", "--no-defaults", f"--socket={self.socket}", "-uroot",
                 "--skip-comments", "--skip-dump-date", "--single-transaction", database],
                stdout=out, stderr=subprocess.PIPE, text=True, check=False)
        if done.returncode:
            raise ServiceUnavailable(f"mariadb-dump {database}: {done.stderr.strip()[-300:]}")

    def tables(self, database: str) -> list[str]:
        return self._sql("SHOW TABLES", database).stdout.split()

    def stop(self) -> None:
        super().stop()
        if "home" in self.extra:
            shutil.rmtree(self.extra.pop("home"), ignore_errors=True)
