"""A Redis master, its replica and a Sentinel watching them, as real processes on 127.0.0.1.

``SentinelSet`` starts them (Debian's ``redis-server`` and ``redis-sentinel``), waits until the
Sentinel knows the replica (a failover needs one), and can fail the master over (``SENTINEL
FAILOVER``) or kill it, returning once the Sentinel names the new master. One Sentinel with a
quorum of 1 is enough to elect; the reference cluster (``make cluster``) runs three.
"""
from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import redis

from simulator.procutil import free_port, wait_until
from tests.processes import real_clock_env
from tests.reliability.servers import RedisServer

MASTER_NAME = "scanmaster"


def sentinel_binary() -> str | None:
    return shutil.which("redis-sentinel") or (shutil.which("redis-sentinel", path="/usr/bin:/usr/sbin"))


class SentinelSet:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.master = RedisServer(workdir / "a")
        self.replica = RedisServer(workdir / "b")
        self.sentinel_port = free_port()
        self.sentinel_proc: subprocess.Popen | None = None
        self.url = f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{MASTER_NAME}/0"

    def start(self) -> SentinelSet:
        self.master.start()
        self.replica.start()
        self.server(self.replica).replicaof("127.0.0.1", self.master.port)
        wait_until(lambda: self.server(self.replica).info("replication")["master_link_status"] == "up", 20,
                   "the replica's link to the master")
        conf = self.workdir / "sentinel.conf"  # the Sentinel rewrites its file: one of its own
        conf.write_text(f"port {self.sentinel_port}\nbind 127.0.0.1\ndaemonize no\ndir {self.workdir}\n"
                        f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master.port} 1\n"
                        f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
                        f"sentinel failover-timeout {MASTER_NAME} 10000\n")
        self._log = open(self.workdir / "sentinel.log", "wb")
        self.sentinel_proc = subprocess.Popen([sentinel_binary(), str(conf)], stdout=self._log,
                                              stderr=subprocess.STDOUT, start_new_session=True, env=real_clock_env())
        wait_until(lambda: any(r["port"] == self.replica.port and "s_down" not in r["flags"]
                               for r in self.sentinel().sentinel_slaves(MASTER_NAME)), 30,
                   "the Sentinel to know the replica")
        return self

    def server(self, which: RedisServer) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=which.port, socket_timeout=2, decode_responses=True)

    def sentinel(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.sentinel_port, socket_timeout=2, decode_responses=True)

    def master_port(self) -> int:
        return int(self.sentinel().sentinel_get_master_addr_by_name(MASTER_NAME)[1])

    def failover(self) -> RedisServer:
        """``SENTINEL FAILOVER``: the replica promoted, the old master made its replica; returns the new master."""
        old, new = self._pair()

        def asked():  # NOGOODSLAVE until the Sentinel has had the replica's own INFO: asked again
            try:
                return self.sentinel().execute_command("SENTINEL", "FAILOVER", MASTER_NAME)
            except redis.ResponseError as exc:
                if "NOGOODSLAVE" not in str(exc):
                    raise
                return False
        wait_until(asked, 15, "the Sentinel to accept a failover")
        return self._await_master(new, old)

    def kill_master(self) -> RedisServer:
        """The master killed (SIGKILL); returns the replica once the Sentinel has promoted it."""
        old, new = self._pair()
        old.kill(signal.SIGKILL)
        return self._await_master(new, old)

    def _pair(self) -> tuple[RedisServer, RedisServer]:
        port = self.master_port()
        return (self.master, self.replica) if port == self.master.port else (self.replica, self.master)

    def _await_master(self, new: RedisServer, old: RedisServer) -> RedisServer:
        def switched():  # as clients ask (SENTINEL MASTERS): the new address, no longer down
            state = self.sentinel().sentinel_master(MASTER_NAME)
            return (state["port"] == new.port and not (state["is_sdown"] or state["is_odown"])
                    and self.server(new).info("replication")["role"] == "master")
        wait_until(switched, 30,
                   f"the Sentinel to promote the replica on port {new.port}")
        if old.running():  # the failover ends when the old master has been made a replica
            wait_until(lambda: self.server(old).info("replication")["role"] == "slave", 30,
                       f"the Sentinel to demote the old master on port {old.port}")
        return new

    def stop(self) -> None:
        if self.sentinel_proc is not None and self.sentinel_proc.poll() is None:
            self.sentinel_proc.kill()
            self.sentinel_proc.wait(10)
            self._log.close()
        for server in (self.master, self.replica):
            server.kill()
