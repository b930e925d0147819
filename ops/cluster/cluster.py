"""``make cluster`` / ``make cluster-down``: the reference cluster, on one Linux machine, as root.

Every host is a network namespace (``scanapi-<host>``) joined to the bridge ``scanapi-br`` and
addressed in 198.18.0.0/24 (the benchmarking range: nothing leaves the machine; the bridge itself is
198.18.0.1, how this namespace reaches them). From Debian's packages and the project's virtualenv:

    lb      198.18.0.10  HAProxy (:80 -> the APIs, held calls -> the held servers), a Sentinel
    api1/2  .21 .22      gunicorn API (:8000) and held server (:8001)
    wrk1/2  .31 .32      python -m workers
    pg1/2   .41 .42      PostgreSQL 15 under Patroni (synchronous mode), REST on :8008
    etcd    .50          etcd, Patroni's store
    redis1/2 .61 .62     Redis master / replica, a Sentinel each (3 with lb's)
    sim     .70          the engine simulator (:8700)

``up`` starts it all, prints the API's address and a demo key, and waits: Ctrl-C (or SIGTERM) stops
it; ``down`` stops one left running (another terminal, a killed ``up``). Either way: every process of
the namespaces ends, the namespaces, the bridge and its address go, the state folder is removed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Root only (the script refuses anyone else); ``up`` removes and remakes it.
STATE = Path(os.environ.get("CLUSTER_STATE", "/var/tmp/scanapi-cluster"))  # noqa: S108
LOGS_KEPT = STATE.parent / f"{STATE.name}-logs"
PREFIX, BRIDGE, NET = "scanapi-", "scanapi-br", "198.18.0"
HOSTS = {"lb": 10, "api1": 21, "api2": 22, "wrk1": 31, "wrk2": 32, "pg1": 41, "pg2": 42, "etcd": 50,
         "redis1": 61, "redis2": 62, "sim": 70}
PG_BIN = Path("/usr/lib/postgresql/15/bin")
# What each binary comes from (Debian bookworm).
PACKAGES = {"patroni": "patroni", "etcd": "etcd-server", "haproxy": "haproxy", "redis-server": "redis-server",
            "redis-sentinel": "redis-sentinel", str(PG_BIN / "postgres"): "postgresql-15"}
MASTER = "scanmaster"
DATABASE = "scanapi"
ENGINE_TOKEN = "cluster-engine-token"  # noqa: S105 - the simulator's, inside the namespaces only


def addr(host: str) -> str:
    return f"{NET}.{HOSTS[host]}"


def database_url() -> str:
    return (f"postgresql://postgres@{addr('pg1')}:5432,{addr('pg2')}:5432/{DATABASE}"
            "?target_session_attrs=read-write&connect_timeout=2")


def redis_url() -> str:
    return f"redis+sentinel://{addr('redis1')}:26379,{addr('redis2')}:26379,{addr('lb')}:26379/{MASTER}/0"


def say(line: str) -> None:
    print(f"cluster: {line}", flush=True)


def run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=60)


# --- the network -------------------------------------------------------------------------------

def network_up() -> None:
    run("ip", "link", "add", BRIDGE, "type", "bridge")
    run("ip", "addr", "add", f"{NET}.1/24", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")
    for host, n in HOSTS.items():
        ns, outer, inner = PREFIX + host, f"scanapi-v{n}", f"eth-{host}"
        run("ip", "netns", "add", ns)
        run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        run("ip", "link", "set", inner, "netns", ns)
        run("ip", "link", "set", outer, "master", BRIDGE)
        run("ip", "link", "set", outer, "up")
        run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{NET}.{n}/24", "dev", inner)
        run("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
        run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")


def namespaces() -> list[str]:
    listed = run("ip", "netns", "list", check=False).stdout.split("\n")
    return [line.split()[0] for line in listed if line.startswith(PREFIX)]


def down() -> None:
    """Stop every process of the cluster's namespaces, then remove them, the bridge and the state."""
    spaces = namespaces()
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        pids = _pids(spaces)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            time.sleep(0.2)
    for ns in spaces:
        run("ip", "netns", "del", ns, check=False)
    run("ip", "link", "del", BRIDGE, check=False)
    for n in HOSTS.values():  # a veth whose namespace went first is gone with it; one left half-made is not
        run("ip", "link", "del", f"scanapi-v{n}", check=False)
    if (STATE / "logs").is_dir():  # the logs outlive the cluster, for a look after
        shutil.rmtree(LOGS_KEPT, ignore_errors=True)
        shutil.move(STATE / "logs", LOGS_KEPT)
    shutil.rmtree(STATE, ignore_errors=True)


def _pids(spaces: list[str]) -> list[int]:
    return [int(p) for ns in spaces for p in run("ip", "netns", "pids", ns, check=False).stdout.split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# --- processes ---------------------------------------------------------------------------------

def spawn(host: str, name: str, cmd: list[str], env: dict | None = None, user: str | None = None) -> None:
    """``cmd`` in ``host``'s namespace, its output in ``STATE/logs/<host>-<name>.log``."""
    prefix = ["ip", "netns", "exec", PREFIX + host] + (["runuser", "-u", user, "--"] if user else [])
    with open(STATE / "logs" / f"{host}-{name}.log", "ab") as log:  # the child keeps its own copy
        subprocess.Popen(prefix + cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         env=env or os.environ.copy(), cwd=ROOT, start_new_session=True)


def wait_for(what: str, check, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # noqa: S110 - not up yet: refused, reset, not answering
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{what} not ready after {seconds:.0f} s (logs in {STATE / 'logs'})")


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 - http URLs built here
        return 200 <= answer.status < 300


def start_etcd() -> None:
    data = STATE / "etcd"
    a = addr("etcd")
    spawn("etcd", "etcd", ["etcd", "--name", "etcd", "--data-dir", str(data),
                           "--listen-client-urls", f"http://{a}:2379", "--advertise-client-urls", f"http://{a}:2379",
                           "--listen-peer-urls", f"http://{a}:2380", "--initial-advertise-peer-urls",
                           f"http://{a}:2380", "--initial-cluster", f"etcd=http://{a}:2380"])
    wait_for("etcd", lambda: http_ok(f"http://{a}:2379/health"))


def start_patroni(host: str) -> None:
    folder = STATE / host
    folder.mkdir(mode=0o700)
    a = addr(host)
    config = {
        "scope": "scanapi", "name": host,
        "restapi": {"listen": f"{a}:8008", "connect_address": f"{a}:8008"},
        "etcd3": {"hosts": f"{addr('etcd')}:2379"},
        "bootstrap": {
            "dcs": {"ttl": 20, "loop_wait": 2, "retry_timeout": 5, "synchronous_mode": True,
                    "postgresql": {"use_pg_rewind": True,
                                   "parameters": {"wal_level": "replica", "hot_standby": "on", "wal_log_hints": "on",
                                                  "max_wal_senders": 10, "max_replication_slots": 10}}},
            "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}],
            # The namespaces' network is this machine's own: trust within it (a reference, not a deployment).
            "pg_hba": [f"host replication replicator {NET}.0/24 trust", f"host all all {NET}.0/24 trust",
                       "local all all trust"],
        },
        "postgresql": {
            "listen": f"{a}:5432", "connect_address": f"{a}:5432", "data_dir": str(folder / "data"),
            "bin_dir": str(PG_BIN), "pgpass": str(folder / "pgpass"),
            "authentication": {"superuser": {"username": "postgres", "password": "cluster"},
                               "replication": {"username": "replicator", "password": "cluster"},
                               "rewind": {"username": "postgres", "password": "cluster"}},
            "parameters": {"unix_socket_directories": str(folder), "max_connections": 200},
        },
    }
    (folder / "patroni.yml").write_text(json.dumps(config, indent=1))  # JSON is YAML
    shutil.chown(folder, "postgres", "postgres")
    shutil.chown(folder / "patroni.yml", "postgres", "postgres")
    spawn(host, "patroni", ["patroni", str(folder / "patroni.yml")], user="postgres")


def primary() -> str | None:
    for host in ("pg1", "pg2"):
        try:
            if http_ok(f"http://{addr(host)}:8008/primary"):
                return host
        except Exception:  # noqa: S112 - a host down, or not its REST API yet
            continue
    return None


def start_redis() -> None:
    for host in ("redis1", "redis2"):
        folder = STATE / host
        folder.mkdir()
        extra = ["--replicaof", addr("redis1"), "6379"] if host == "redis2" else []
        spawn(host, "redis", ["redis-server", "--bind", addr(host), "--port", "6379", "--protected-mode", "no",
                              "--dir", str(folder), "--appendonly", "yes", "--save", ""] + extra)
    for host in ("redis1", "redis2", "lb"):
        folder = STATE / f"sentinel-{host}"
        folder.mkdir()
        conf = folder / "sentinel.conf"
        conf.write_text(f"port 26379\nbind {addr(host)}\nprotected-mode no\ndir {folder}\n"
                        f"sentinel monitor {MASTER} {addr('redis1')} 6379 2\n"
                        f"sentinel down-after-milliseconds {MASTER} 3000\n"
                        f"sentinel failover-timeout {MASTER} 10000\n")
        spawn(host, "sentinel", ["redis-sentinel", str(conf)])


def app_env(host: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "REDIS_", "TEST_"))}
    instance = STATE / f"instance-{host}"
    instance.mkdir(exist_ok=True)
    (instance / "prometheus").mkdir(exist_ok=True)
    env.update({
        # development: the webhook receivers are the simulator's, at a 198.18 address that production's
        # SSRF check refuses; everything else is as in production.
        "APP_ENV": "development", "LOG_FORMAT": "json",
        "DATABASE_URL": database_url(), "REDIS_URL": redis_url(),
        "ENGINE_URL": f"http://{addr('sim')}:8700", "ENGINE_TOKEN": ENGINE_TOKEN,
        "SECRET_KEY": "cluster-secret-key-for-the-reference-cluster-only",
        "PUBLIC_BASE_URL": f"http://{addr('lb')}", "TRUSTED_PROXIES": "1",
        "INSTANCE_PATH": str(instance), "PROMETHEUS_MULTIPROC_DIR": str(instance / "prometheus"),
        # A job Redis lost in a failover (dispatched in the seconds without a master) is found again
        # by the sweep; sooner than the defaults (60 s, 120 s), so that a drill settles in minutes.
        "RECOVERY_INTERVAL_SECONDS": "10", "RECOVERY_STALE_SECONDS": "30",
        "PYTHONUNBUFFERED": "1",
    })
    return env


# The schema (as ``make run`` makes it), and a demo customer sized for a drill's load: Enterprise,
# a million credits, limits far above what one machine's load reaches.
PREPARE = """
from app import create_app
from app.dev import prepare
from app.extensions import db
from app.accounts.models import Customer
from app.accounts import admin
from app.billing import charges
key = prepare()[0].api_key
create_app()
with db.connection_context():
    customer = Customer.get(Customer.name == "Demo customer")
    admin.set_tier(customer.id, "enterprise")
    admin.set_limits(customer.id, inflight=100000, hour=1000000, day=10000000)
    balance = charges.balance_of(customer.id)
    if balance < 1000000:
        charges.credit(customer.id, 1000000 - balance, "reference cluster")
print(key)
"""


# A key of the demo customer whose webhooks go to ``url`` (the drill's receiver); prints it.
WEBHOOK = """
from app import create_app
from app.extensions import db
from app.accounts.models import Customer
from app.webhooks import key_settings
create_app()
with db.connection_context():
    customer = Customer.get(Customer.name == "Demo customer")
    print(key_settings.issue_key(customer.id, "drill", webhook_url="{url}", webhook_secret="{secret}")[1])
"""


def start_app(venv_python: str) -> str:
    """Schema and a demo key (from this namespace, through the bridge), then the API, held servers
    and workers; returns the key."""
    prepared = subprocess.run([venv_python, "-c", PREPARE],
                              check=False, cwd=ROOT, env=app_env("admin"), capture_output=True, text=True,
                              timeout=120)
    if prepared.returncode != 0:
        raise RuntimeError(f"schema and demo key: {prepared.stderr.strip().splitlines()[-1:]}")
    key = prepared.stdout.strip().splitlines()[-1]
    bin_dir = Path(venv_python).parent
    for host in ("api1", "api2"):
        env = dict(app_env(host), GUNICORN_BIND=f"{addr(host)}:8000", WEB_CONCURRENCY="2", GUNICORN_THREADS="8",
                   HELD_BIND=f"{addr(host)}:8001", HELD_WORKERS="1")
        spawn(host, "api", [str(bin_dir / "gunicorn"), "--config", "gunicorn.conf.py", "wsgi:app"], env)
        spawn(host, "held", [str(bin_dir / "gunicorn"), "--config", "gunicorn.held.conf.py", "wsgi:app"], env)
    for host in ("wrk1", "wrk2"):
        spawn(host, "worker", [venv_python, "-m", "workers", "--name", host], app_env(host))
    for host in ("api1", "api2"):
        wait_for(f"the API on {host}", lambda h=host: http_ok(f"http://{addr(h)}:8000/readyz"))
    return key


# What HAProxy answers itself (no API host free, one that died mid-answer, one too slow): the API's
# own 503, JSON with Retry-After, not HAProxy's HTML page.
UNAVAILABLE = ("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 5\r\n"
               "Cache-Control: no-store\r\nConnection: close\r\n\r\n"
               '{"ok": false, "error": "service_unavailable", "message": "the service is unavailable; retry shortly", '
               '"request_id": "req_load_balancer"}\n')


def start_lb() -> None:
    servers = "\n".join(f"    server {h} {addr(h)}:{{port}} check inter 1s fall 2 rise 2" for h in ("api1", "api2"))
    (STATE / "unavailable.http").write_text(UNAVAILABLE)
    conf = STATE / "haproxy.cfg"
    conf.write_text(f"""global
    maxconn 4000
defaults
    mode http
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    option forwardfor
    # A host that refuses the connection (dead) is skipped for the other: the request never reached it.
    option redispatch
    retries 2
    retry-on conn-failure
    errorfile 502 {STATE / 'unavailable.http'}
    errorfile 503 {STATE / 'unavailable.http'}
    errorfile 504 {STATE / 'unavailable.http'}
frontend api
    bind {addr('lb')}:80
    acl held url_param(wait) -m found
    acl stream path_beg /api/v1/events/stream
    use_backend held if held or stream
    default_backend api
backend api
    option httpchk GET /healthz
{servers.format(port=8000)}
backend held
    option httpchk GET /healthz
{servers.format(port=8001)}
""")
    spawn("lb", "haproxy", ["haproxy", "-W", "-db", "-f", str(conf)])
    wait_for("the load balancer", lambda: http_ok(f"http://{addr('lb')}/healthz"))


def up(venv_python: str) -> str:
    missing = [package for binary, package in PACKAGES.items() if shutil.which(binary) is None]
    if missing:
        raise RuntimeError(f"missing Debian packages: apt-get install -y {' '.join(sorted(set(missing)))}")
    if namespaces():
        raise RuntimeError("a cluster is already up (make cluster-down stops it)")
    shutil.rmtree(STATE, ignore_errors=True)
    (STATE / "logs").mkdir(parents=True)
    STATE.chmod(0o755)
    network_up()
    say("network up (198.18.0.0/24); starting etcd, PostgreSQL under Patroni, Redis and Sentinels")
    start_etcd()
    start_patroni("pg1")
    start_patroni("pg2")
    start_redis()
    spawn("sim", "simulator", [venv_python, "-m", "simulator", "--host", addr("sim"), "--port", "8700",
                               "--time-scale", "0.05"], dict(os.environ, ENGINE_TOKEN=ENGINE_TOKEN))
    wait_for("a Patroni primary", lambda: primary() is not None, 120)
    _create_database()
    wait_for("a synchronous standby", _synchronous_standby, 120)
    say(f"PostgreSQL primary on {primary()}; starting the API, held servers and workers")
    key = start_app(venv_python)
    start_lb()
    return key


def _create_database() -> None:
    import psycopg2
    conn = psycopg2.connect(f"host={addr(primary())} user=postgres dbname=postgres connect_timeout=3")
    conn.autocommit = True
    with conn.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
        if cursor.fetchone() is None:
            cursor.execute(f"CREATE DATABASE {DATABASE}")
    conn.close()


def _synchronous_standby() -> bool:
    with urllib.request.urlopen(f"http://{addr('pg1')}:8008/cluster", timeout=2) as answer:
        members = json.load(answer)["members"]
    return any(m["role"] in ("sync_standby", "synchronous_standby") and m["state"] in ("running", "streaming")
               for m in members)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ops/cluster/cluster.py", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("up", "down"))
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("error: the cluster's network namespaces need root", file=sys.stderr)
        return 1
    if args.command == "down":
        down()
        say(f"down: no namespace, process, address or state left (logs in {LOGS_KEPT})")
        return 0
    stopping = []

    def stop(signum, frame):
        stopping.append(signum)
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    # Ctrl-C too, explicitly: a process started in the background of a script (`make cluster &`, a CI
    # job) inherits SIGINT ignored, and Python then leaves it so: Ctrl-C would not stop the cluster.
    signal.signal(signal.SIGINT, stop)
    try:
        key = up(sys.executable)
        say(f"up: API http://{addr('lb')}/ (held calls too), PostgreSQL {database_url()}, Redis {redis_url()}")
        say(f"demo key (shown once): {key}")
        say(f"logs in {STATE / 'logs'} (kept in {LOGS_KEPT} after); Ctrl-C (or make cluster-down) stops it")
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        say("stopping")
        return 0
    except Exception as exc:  # one line, then everything that was started is stopped
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        down()
        say(f"down: no namespace, process, address or state left (logs in {LOGS_KEPT})")


if __name__ == "__main__":
    sys.exit(main())
