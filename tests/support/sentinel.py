"""A replicated Redis as production runs it: a master, a replica (or more) and
three Sentinels (`redis-server --sentinel`), all real servers on loopback.

The Sentinels judge the master down after `down_after` ms and fail over
within `failover_timeout` ms; `kill_master()` is a crash, and
`wait_for_failover()` returns the address Sentinel promoted.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from tests.support.ports import free_port
from tests.support.redis_server import RedisServer

MASTER_NAME = "toolnexus"


class SentinelGroup:
    def __init__(
        self,
        *,
        down_after: int = 1000,
        failover_timeout: int = 5000,
        sentinel_password: str | None = None,
        password: str | None = None,
        appendfsync: str = "always",
        replicas: int = 1,
    ) -> None:
        self.down_after = down_after
        self.failover_timeout = failover_timeout
        self.sentinel_password = sentinel_password
        self.password = password
        # A replica syncs at once, not after the default 5 s wait for others.
        quick = ["--repl-diskless-sync-delay", "0"]
        self.master = RedisServer(
            appendonly=True, password=password, appendfsync=appendfsync, args=quick
        )
        replica_args = [*quick, "--replicaof", "127.0.0.1", str(self.master.port)]
        if password:
            replica_args += ["--masterauth", password]
        self.replicas = [
            RedisServer(
                appendonly=True, password=password, appendfsync=appendfsync, args=replica_args
            )
            for _ in range(replicas)
        ]
        self.replica = self.replicas[0]
        if password:
            self.master.args += ["--masterauth", password]  # it may become a replica
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.directory = Path(tempfile.mkdtemp(prefix="toolnexus-sentinel-"))
        self.sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """The store and broker URL: every Sentinel, the master's name, db 0."""
        login = f":{self.password}@" if self.password else ""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{login}{hosts}/{MASTER_NAME}/0"

    def start(self) -> SentinelGroup:
        self.master.start()
        for replica in self.replicas:
            replica.start()
        self._wait_replicating(10.0)
        for index, port in enumerate(self.sentinel_ports):
            self.sentinels.append(self._start_sentinel(index, port))
        self._wait_sentinels_agree(15.0)
        return self

    def _start_sentinel(self, index: int, port: int) -> subprocess.Popen[bytes]:
        config = self.directory / f"sentinel-{index}.conf"
        lines = [
            f"port {port}",
            "bind 127.0.0.1",
            f"dir {self.directory}",
            f"logfile {self.directory / f'sentinel-{index}.log'}",
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master.port} 2",
            f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after}",
            f"sentinel failover-timeout {MASTER_NAME} {self.failover_timeout}",
            f"sentinel parallel-syncs {MASTER_NAME} 1",
        ]
        if self.password:
            lines.append(f"sentinel auth-pass {MASTER_NAME} {self.password}")
        if self.sentinel_password:
            lines.append(f"requirepass {self.sentinel_password}")
            lines.append(f"sentinel sentinel-pass {self.sentinel_password}")
        config.write_text("\n".join(lines) + "\n")
        binary = shutil.which("redis-server")
        assert binary is not None
        return subprocess.Popen(
            [binary, str(config), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def sentinel_client(self, index: int = 0) -> redis.Redis:
        return redis.Redis(
            port=self.sentinel_ports[index],
            password=self.sentinel_password,
            socket_timeout=1.0,
            decode_responses=True,
        )

    def master_address(self, index: int = 0) -> tuple[str, int] | None:
        try:
            found = self.sentinel_client(index).execute_command(
                "SENTINEL", "get-master-addr-by-name", MASTER_NAME
            )
        except redis.RedisError:
            return None
        return (found[0], int(found[1])) if found else None

    def _wait_sentinels_agree(self, timeout: float) -> None:
        """Every Sentinel answers, knows the replica and the other two."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ready = all(
                    int(self.sentinel_client(i).sentinel_master(MASTER_NAME)["num-other-sentinels"])
                    == 2
                    and self.sentinel_client(i).sentinel_slaves(MASTER_NAME)
                    for i in range(3)
                )
            except (redis.RedisError, KeyError):
                ready = False
            if ready:
                return
            time.sleep(0.1)
        raise TimeoutError("the Sentinels did not find each other and the replica in time")

    def _wait_replicating(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.master.online_replicas() == len(self.replicas):
                return
            time.sleep(0.05)
        raise TimeoutError("the replicas did not start replicating in time")

    def kill_master(self) -> None:
        self.master.kill()

    def wait_for_failover(self, timeout: float = 75.0) -> tuple[str, int]:
        """The address every Sentinel names once the replica is promoted.
        A few seconds, usually; the deadline allows for a Sentinel in TILT
        mode (30 s of judging nothing, entered when its timer runs two
        seconds late, as on a loaded machine) and an election tried again
        after it (twice the failover timeout)."""
        old = ("127.0.0.1", self.master.port)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            named = {self.master_address(i) for i in range(3)}
            if len(named) == 1 and None not in named and old not in named:
                address = named.pop()
                assert address is not None
                return address
            time.sleep(0.05)
        raise TimeoutError("Sentinel did not promote the replica in time")

    def rejoin_old_master(self, promoted: tuple[str, int], timeout: float = 60.0) -> None:
        """Start the killed master again as the promoted node's replica and
        return once the promoted node has it in sync. This is what Sentinel
        tells a returning master to become, but Sentinel first waits seconds of
        its own after seeing it back, longer under load, which a test about
        writes through a failover need not wait on."""
        args = self.master.args
        self.master.args = [*args, "--replicaof", promoted[0], str(promoted[1])]
        try:
            self.master.start()
        finally:
            self.master.args = args
        self.wait_in_sync(promoted, timeout)

    def wait_in_sync(self, address: tuple[str, int] | None = None, timeout: float = 60.0) -> None:
        """Return once the node at `address` (None: the master the Sentinels
        name, asked again each time) has a replica in sync: after a failover
        the other node resynchronises first, and until then a write asked to
        wait for a replica is not confirmed."""
        deadline = time.monotonic() + timeout
        while True:
            at = address or self.master_address()
            nodes = [n for n in (self.master, *self.replicas) if at and n.port == at[1]]
            if nodes and nodes[0].online_replicas() >= 1:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"no replica in sync with {at} in time")
            time.sleep(0.05)

    def close(self) -> None:
        for process in self.sentinels:
            if process.poll() is None:
                process.kill()
                process.wait(10)
        self.master.close()
        for replica in self.replicas:
            replica.close()
        shutil.rmtree(self.directory, ignore_errors=True)
