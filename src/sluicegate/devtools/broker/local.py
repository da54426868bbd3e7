"""A single-node Apache Kafka broker (KRaft, broker+controller) run from Maven Central jars.

No Docker, no tarball download: the Kafka jars are resolved once with Maven into a cache
directory, then ``java -cp 'libs/*' kafka.Kafka server.properties`` runs the broker.

Layout:

- artifacts: ``$SLUICEGATE_CACHE_DIR/kafka-3.9.1/libs`` (default root ``~/.cache/sluicegate``),
  resolved under a file lock, completed by a ``.resolved`` marker (``sluicegate.devtools.broker.maven``).
- run directory (default ``<cache root>/broker``): ``data/`` (the log dir), ``server.properties``,
  ``log4j.properties``, ``broker.log`` (the JVM's stdout and stderr) and ``broker.json``
  (pid, bootstrap, ports) while a broker runs.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from sluicegate.cache_dir import cache_root
from sluicegate.devtools.broker.maven import MavenError, is_resolved, require_executable, resolve_jars
from sluicegate.devtools.broker.mtls import MtlsSetup
from sluicegate.devtools.broker.secure import ADMIN_USER, DEFAULT_USERS, SecureSetup, SecureSetupError
from sluicegate.kafka.security import KafkaSecurity

KAFKA_VERSION = "3.9.1"
SCALA_VERSION = "2.13"

#: Maven coordinates resolved into the cache (group, artifact, version).
KAFKA_ARTIFACTS: tuple[tuple[str, str, str], ...] = (
    ("org.apache.kafka", f"kafka_{SCALA_VERSION}", KAFKA_VERSION),
    ("ch.qos.reload4j", "reload4j", "1.2.25"),
    ("org.slf4j", "slf4j-reload4j", "1.7.36"),
)

_STATE_FILE = "broker.json"
QUICK_JIT_OPTION = "-XX:TieredStopAtLevel=1"
"""The JVM option that compiles with C1 only: what a JVM living for a minute wants (the tests'
broker and Spark drivers), not one serving for hours."""
_LOG_FILE = "broker.log"

Echo = Callable[[str], None]
_T = TypeVar("_T")


class BrokerError(RuntimeError):
    """The local broker could not be provisioned, started or stopped."""


def stderr_echo(message: str) -> None:
    print(f"sluicegate broker: {message}", file=sys.stderr, flush=True)


def artifacts_dir() -> Path:
    """Where the Kafka jars of this version live (``<cache root>/kafka-3.9.1``)."""
    return cache_root() / f"kafka-{KAFKA_VERSION}"


def default_run_dir() -> Path:
    """Default run directory of ``sluicegate broker`` (``<cache root>/broker``)."""
    return cache_root() / "broker"


def _require_executable(name: str, purpose: str) -> str:
    return require_executable(
        name,
        purpose,
        hint="or point KAFKA_BOOTSTRAP_SERVERS at an existing Kafka broker instead",
        error=BrokerError,
    )


def ensure_kafka_artifacts(echo: Echo = stderr_echo) -> Path:
    """Resolve the Kafka jars from Maven Central once; return the ``libs`` directory.

    Idempotent and safe when several processes race: resolution runs under an exclusive
    ``flock`` on ``<dir>/.lock`` and is published by renaming a finished directory into place
    and then writing the ``.resolved`` marker (``sluicegate.devtools.broker.maven.resolve_jars``).
    """
    base = artifacts_dir()
    if is_resolved(base):
        return base / "libs"
    _require_executable("mvn", "resolve the Kafka jars from Maven Central")
    try:
        return resolve_jars(
            base,
            KAFKA_ARTIFACTS,
            project="kafka-runtime",
            version=KAFKA_VERSION,
            label=f"Apache Kafka {KAFKA_VERSION}",
            echo=echo,
        )
    except MavenError as exc:
        raise BrokerError(str(exc)) from exc


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, base64url without padding (22 characters).

    Like Kafka's ``Uuid.randomUuid()``, never one starting with ``-``: the storage tool's
    argument parser would take it for an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def free_port(exclude: frozenset[int] = frozenset()) -> int:
    """A TCP port free on 127.0.0.1 right now (bind to port 0)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in exclude:
            return port
    raise BrokerError("could not find a free TCP port on 127.0.0.1")


def _port_is_free(port: int) -> bool:
    """True if a server could listen on ``port`` now. Binds with SO_REUSEADDR, as Kafka's
    own acceptor does: connections of a killed broker linger in TIME_WAIT for about a
    minute, and without it the check refused a port Kafka itself would take."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _tcp_open(port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class ClusterMember:
    """This broker's place in a cluster of several (``cluster.py``): its node id, the
    controller quorum (every node is broker and controller), the shared cluster id, and
    the replication of the cluster's own topics."""

    node_id: int
    #: (node id, controller port) of every voter, this node's among them.
    voters: tuple[tuple[int, int], ...]
    cluster_id: str
    replication: int

    @property
    def controller_port(self) -> int:
        return dict(self.voters)[self.node_id]

    def properties(self) -> dict[str, str]:
        replicated = str(self.replication)
        return {
            "node.id": str(self.node_id),
            "controller.quorum.voters": ",".join(f"{node}@127.0.0.1:{port}" for node, port in self.voters),
            "default.replication.factor": replicated,
            "offsets.topic.replication.factor": replicated,
            "transaction.state.log.replication.factor": replicated,
            "transaction.state.log.min.isr": str(min(2, self.replication)),
            # min.insync.replicas stays Kafka's default (1), as on many real clusters: what
            # a new topic needs is sluicegate's to set (sluicegate.kafka.replication).
        }


SECURE_MODES = ("scram", "mtls")
"""``scram``: a SASL_SSL listener, SCRAM users (secure.py); ``mtls``: an SSL listener that
requires client certificates (mtls.py). Both enforce ACLs."""


def secured_setup(directory: Path, mode: str) -> SecureSetup | MtlsSetup:
    if mode not in SECURE_MODES:
        raise BrokerError(f"unknown secured mode {mode!r}: one of {', '.join(SECURE_MODES)}")
    return MtlsSetup(directory) if mode == "mtls" else SecureSetup(directory)


def _server_properties(
    port: int,
    controller_port: int,
    data_dir: Path,
    secure: SecureSetup | MtlsSetup | None = None,
    member: ClusterMember | None = None,
) -> str:
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "10",
        # Topics are created by `sluicegate topics apply` or the coordinator, never implicitly.
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
        "delete.topic.enable": "true",
    }
    if member is not None:
        props.update(member.properties())
    if secure is not None:
        props.update(secure.server_properties(port))
        props["listeners"] += f",CONTROLLER://127.0.0.1:{controller_port}"
    lines = [f"{k}={v}" for k, v in props.items()]
    return "# written by sluicegate.devtools.broker.local\n" + "\n".join(lines) + "\n"


_LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=INFO
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.log.LogCleaner=WARN
log4j.logger.org.apache.kafka.clients=WARN
"""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still "exists"; treat it as dead.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _wait_released(ports: Sequence[int], timeout_s: float = 5.0) -> None:
    """Until a broker that died a moment ago has let go of its ports: a SIGKILLed JVM is a
    zombie within ~30 ms, but its listening sockets stay unbindable for up to ~0.1 s more
    (on a loaded machine, longer). A port someone else holds is reported by the start."""
    deadline = time.monotonic() + timeout_s
    while not all(_port_is_free(p) for p in ports) and time.monotonic() < deadline:
        time.sleep(0.05)


def _is_our_broker(pid: int, server_properties: Path) -> bool:
    """True if ``pid`` is a Kafka JVM started with this run directory's server.properties."""
    if not _pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        try:
            import psutil

            cmdline = [a.encode() for a in psutil.Process(pid).cmdline()]
        except Exception:
            return False
    args = [a.decode(errors="replace") for a in cmdline]
    return "kafka.Kafka" in args and str(server_properties) in args


def run_coroutine(factory: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run a coroutine to completion from sync code, even if the caller has a running loop."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()


async def _probe_metadata(bootstrap: str, timeout_s: float, security: KafkaSecurity | None) -> bool:
    """True if the broker answers a metadata request listing itself and a controller."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap,
        request_timeout_ms=3000,
        client_id="sluicegate-broker-probe",
        **(security or KafkaSecurity()).aiokafka_settings(),
    )
    try:
        async with asyncio.timeout(timeout_s):
            await admin.start()
            cluster = await admin.describe_cluster()
            await admin.list_topics()
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            await admin.close()
    brokers = cluster.get("brokers") or []
    return bool(brokers) and cluster.get("controller_id", -1) != -1


def probe_broker(bootstrap: str, timeout_s: float = 5.0, security: KafkaSecurity | None = None) -> bool:
    """True if a Kafka broker at ``bootstrap`` answers metadata requests."""
    return run_coroutine(lambda: _probe_metadata(bootstrap, timeout_s, security))


@dataclass(frozen=True)
class BrokerStatus:
    """What ``broker.json`` in a run directory says, checked against the live process."""

    run_dir: Path
    running: bool
    pid: int | None = None
    bootstrap: str | None = None
    port: int | None = None
    controller_port: int | None = None
    started_at: float | None = None
    reachable: bool = False
    kafka_version: str = KAFKA_VERSION

    @property
    def log_file(self) -> Path:
        return self.run_dir / _LOG_FILE


@dataclass
class LocalKafkaBroker:
    """One local single-node Kafka (KRaft) broker with its own run directory.

    ``start()`` returns ``"127.0.0.1:PORT"`` once the broker answers metadata requests;
    ``stop()`` ends it (SIGTERM, then SIGKILL after ``stop_timeout_s``) and removes its data
    unless ``keep``. Used as a context manager it starts on enter and stops on exit. If a
    broker from the same run directory is already running, ``start()`` returns its address.
    """

    run_dir: Path = field(default_factory=default_run_dir)
    keep: bool = False
    heap: str = "512m"
    #: Compile with C1 only (``QUICK_JIT_OPTION``). A broker that lives for minutes,
    #: as a test session's does, spent a third of its CPU in the C2 compiler, for code it
    #: did not run long enough to gain from; a broker that serves for hours wants C2.
    quick_jit: bool = False
    #: Lines appended to the broker's log4j configuration (a benchmark turns Kafka's request
    #: logger on with it: benchmarks/idle_control_plane.py).
    log4j_extra: str = ""
    port: int | None = None
    controller_port: int | None = None
    stop_timeout_s: float = 20.0
    #: Linux only: the kernel sends the broker SIGTERM when the thread that started it dies
    #: (for test sessions killed without teardown). Leave off for detached brokers.
    die_with_parent: bool = False
    echo: Echo = stderr_echo
    #: Secured mode: a SASL_SSL listener, SCRAM users and ACLs enforced, with the
    #: certificates and passwords kept in this directory (see secure.py).
    secure_dir: Path | None = None
    secure_users: tuple[str, ...] = DEFAULT_USERS
    #: How clients authenticate in secured mode: ``scram`` or ``mtls`` (SECURE_MODES).
    secure_mode: str = "scram"
    #: One node of a cluster (``cluster.py``); None: a cluster of its own.
    member: ClusterMember | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir).expanduser().resolve()
        if self.member is not None:
            self.controller_port = self.member.controller_port
        if self.secure_dir is not None:
            self.secure_dir = Path(self.secure_dir).expanduser().resolve()

    @property
    def secure(self) -> SecureSetup | MtlsSetup | None:
        return secured_setup(self.secure_dir, self.secure_mode) if self.secure_dir is not None else None

    def _admin_security(self) -> KafkaSecurity | None:
        secure = self.secure or self._running_secure()
        return secure.security(ADMIN_USER) if secure is not None else None

    def _running_secure(self) -> SecureSetup | MtlsSetup | None:
        state = self._read_state()
        folder = state.get("secure_dir") if state else None
        return secured_setup(Path(folder), str(state.get("secure_mode") or "scram")) if state and folder else None

    # --- paths -------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        return self.run_dir / "data"

    @property
    def state_file(self) -> Path:
        return self.run_dir / _STATE_FILE

    @property
    def log_file(self) -> Path:
        return self.run_dir / _LOG_FILE

    @property
    def server_properties(self) -> Path:
        return self.run_dir / "server.properties"

    @property
    def bootstrap(self) -> str | None:
        """The bootstrap address if a broker from this run directory is running."""
        st = self.status()
        return st.bootstrap if st.running else None

    # --- state -------------------------------------------------------------------------
    def _read_state(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def status(self, probe: bool = False) -> BrokerStatus:
        """The broker of this run directory: running (its process is alive) and, with
        ``probe``, reachable (it answers a metadata request)."""
        state = self._read_state()
        if state is None:
            return BrokerStatus(run_dir=self.run_dir, running=False)
        pid = int(state["pid"])
        running = _is_our_broker(pid, self.server_properties)
        bootstrap = str(state["bootstrap"])
        reachable = False
        if running:
            reachable = (
                probe_broker(bootstrap, security=self._admin_security()) if probe else _tcp_open(int(state["port"]))
            )
        return BrokerStatus(
            run_dir=self.run_dir,
            running=running,
            pid=pid,
            bootstrap=bootstrap,
            port=int(state["port"]),
            controller_port=int(state["controller_port"]),
            started_at=float(state.get("started_at", 0.0)),
            reachable=reachable,
            kafka_version=str(state.get("kafka_version", KAFKA_VERSION)),
        )

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of broker.log."""
        try:
            text = self.log_file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no broker.log)"
        return "\n".join(text.splitlines()[-lines:])

    def _failure_report(self) -> str:
        """The first ERROR of broker.log with a few lines of context, then its last 20 lines."""
        try:
            log_lines = self.log_file.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no broker.log)"
        first_error = next(
            (i for i, line in enumerate(log_lines) if "] ERROR " in line or "] FATAL " in line),
            None,
        )
        parts = []
        if first_error is not None and first_error < len(log_lines) - 20:
            excerpt = "\n".join(log_lines[first_error : first_error + 6])
            parts.append(f"first error in {self.log_file}:\n{excerpt}\n")
        parts.append(f"last lines of {self.log_file}:\n" + "\n".join(log_lines[-20:]))
        return "\n".join(parts)

    # --- lifecycle ---------------------------------------------------------------------
    def start(self, timeout_s: float = 60.0, wait: bool = True) -> str:
        """Start the broker (or find it running) and return its bootstrap address; with
        ``wait`` (the default) once it answers. A node of a cluster answers once a majority
        of its controllers runs: ``cluster.py`` starts every node, then waits for each."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.run_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = self.status()
            if current.running and current.bootstrap:
                self.echo(f"broker already running in {self.run_dir} (pid {current.pid}) at {current.bootstrap}")
                if wait:  # not ours to stop if it does not answer: it was running before
                    self._wait_ready(current.bootstrap, current.pid, time.monotonic() + timeout_s)
                return current.bootstrap
            if current.pid is not None:
                self.echo(f"removing stale state of a dead broker (pid {current.pid})")
                _wait_released([p for p in (current.port, current.controller_port) if p])
                self.state_file.unlink(missing_ok=True)
            bootstrap = self._spawn()
        if wait:
            self.wait_ready(timeout_s)
        return bootstrap

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until the broker just started answers metadata requests; if it does not within
        ``timeout_s``, it is stopped and BrokerError says why (from its log)."""
        current = self.status()
        if current.bootstrap is None:
            raise BrokerError(f"no broker runs in {self.run_dir}")
        started = time.monotonic()
        try:
            self._wait_ready(current.bootstrap, current.pid, started + timeout_s)
        except BaseException:
            if current.pid is not None:
                self._terminate(current.pid)
            self._cleanup()
            raise
        if self._proc is not None and self._proc.pid == current.pid:
            self.echo(f"broker ready at {current.bootstrap} in {time.monotonic() - started:.1f}s (pid {current.pid})")

    def kill(self) -> None:
        """SIGKILL the running broker, as a machine that dies would stop it; its data stays
        (``keep``-ing brokers start again from it)."""
        current = self.status()
        if not current.running or current.pid is None:
            raise BrokerError(f"no broker runs in {self.run_dir}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(current.pid, signal.SIGKILL)
        if not self._wait_exit(current.pid, 10.0):
            raise BrokerError(f"broker pid {current.pid} did not die of SIGKILL")

    def _previous_ports(self) -> tuple[int | None, int | None]:
        """The (broker, controller) ports of the last server.properties of this run dir."""
        try:
            text = self.server_properties.read_text(encoding="utf-8")
        except OSError:
            return None, None
        found = dict(re.findall(r"(PLAINTEXT|SASL_SSL|CONTROLLER)://127\.0\.0\.1:(\d+)", text))
        plain, ctrl = found.get("PLAINTEXT") or found.get("SASL_SSL"), found.get("CONTROLLER")
        return (int(plain) if plain else None), (int(ctrl) if ctrl else None)

    def _choose_ports(self) -> tuple[int, int]:
        port, cport = self.port, self.controller_port
        # Reusing kept data: prefer the previous ports so the advertised address stays the same.
        if (self.data_dir / "meta.properties").is_file():
            old_port, old_cport = self._previous_ports()
            if port is None and old_port and _port_is_free(old_port):
                port = old_port
            if cport is None and old_cport and old_cport != port and _port_is_free(old_cport):
                cport = old_cport
        for name, chosen in (("port", port), ("controller port", cport)):
            if chosen is not None and not _port_is_free(chosen):
                raise BrokerError(f"the broker {name} {chosen} is already in use on 127.0.0.1")
        if port is None:
            port = free_port(frozenset({cport} if cport else ()))
        if cport is None:
            cport = free_port(frozenset({port}))
        if port == cport:
            raise BrokerError(f"broker port and controller port are both {port}")
        return port, cport

    def java_command(self, java: str, classpath: str, log4j: Path) -> list[str]:
        """The command line that runs the broker (its settings in ``server_properties``)."""
        return [
            java,
            f"-Xmx{self.heap}",
            f"-Xms{min(256, _heap_mb(self.heap))}m",
            "-XX:+UseG1GC",
            *([QUICK_JIT_OPTION] if self.quick_jit else []),
            "-Djava.awt.headless=true",
            f"-Dlog4j.configuration=file:{log4j}",
            f"-Dkafka.logs.dir={self.run_dir}",
            "-cp",
            classpath,
            "kafka.Kafka",
            str(self.server_properties),
        ]

    def _spawn(self) -> str:
        java = _require_executable("java", "run the Kafka broker")
        libs = ensure_kafka_artifacts(self.echo)
        port, cport = self._choose_ports()
        bootstrap = f"127.0.0.1:{port}"
        classpath = f"{libs}/*"

        if not self.keep or not (self.data_dir / "meta.properties").is_file():
            shutil.rmtree(self.data_dir, ignore_errors=True)
        secure = self.secure
        if secure is not None:
            try:
                secure.ensure(self.secure_users)
            except SecureSetupError as exc:
                raise BrokerError(str(exc)) from None
        self.server_properties.write_text(
            _server_properties(port, cport, self.data_dir, secure, self.member), encoding="utf-8"
        )
        log4j = self.run_dir / "log4j.properties"
        log4j.write_text(_LOG4J + self.log4j_extra, encoding="utf-8")

        if not (self.data_dir / "meta.properties").is_file():
            cluster_id = self.member.cluster_id if self.member is not None else new_cluster_id()
            fmt = subprocess.run(
                [
                    java,
                    "-cp",
                    classpath,
                    f"-Dlog4j.configuration=file:{log4j}",
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    cluster_id,
                    "-c",
                    str(self.server_properties),
                    *(secure.format_arguments() if secure is not None else []),
                ],
                capture_output=True,
                text=True,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            if fmt.returncode != 0:
                raise BrokerError(
                    f"formatting the KRaft storage in {self.data_dir} failed "
                    f"(exit {fmt.returncode}):\n{fmt.stdout}{fmt.stderr}"
                )

        self.echo(f"starting Kafka {KAFKA_VERSION} (KRaft) at {bootstrap}, run dir {self.run_dir}, log {self.log_file}")
        cmd = self.java_command(java, classpath, log4j)
        if self.log_file.exists():
            self.log_file.replace(self.log_file.with_suffix(".log.1"))
        with open(self.log_file, "wb") as log:
            log.write(f"===== sluicegate: starting {' '.join(cmd)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                cmd,
                cwd=self.run_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent(os.getpid()) if self.die_with_parent else None,
            )
        state = {
            "pid": self._proc.pid,
            "bootstrap": bootstrap,
            "port": port,
            "controller_port": cport,
            "started_at": time.time(),
            "kafka_version": KAFKA_VERSION,
            "run_dir": str(self.run_dir),
            "log_file": str(self.log_file),
            "secure_dir": str(self.secure_dir) if self.secure_dir is not None else None,
            "secure_mode": self.secure_mode,
        }
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.state_file)
        return bootstrap

    def _wait_ready(self, bootstrap: str, pid: int | None, deadline: float) -> None:
        port = int(bootstrap.rsplit(":", 1)[1])
        while True:
            if pid is not None and not _pid_alive(pid):
                code = self._proc.poll() if self._proc is not None else None
                raise BrokerError(f"the Kafka broker exited during start (exit code {code}); {self._failure_report()}")
            if _tcp_open(port) and probe_broker(bootstrap, timeout_s=5.0, security=self._admin_security()):
                return
            if time.monotonic() > deadline:
                raise BrokerError(f"the Kafka broker at {bootstrap} did not answer in time; {self._failure_report()}")
            time.sleep(0.25)

    def _terminate(self, pid: int) -> bool:
        """SIGTERM ``pid``, wait, SIGKILL; True if it is gone."""
        if not _is_our_broker(pid, self.server_properties):
            return not _pid_alive(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if self._wait_exit(pid, self.stop_timeout_s):
            return True
        self.echo(f"broker pid {pid} did not stop within {self.stop_timeout_s:.0f}s; killing it")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return self._wait_exit(pid, 10.0)

    def _wait_exit(self, pid: int, timeout_s: float) -> bool:
        if self._proc is not None and self._proc.pid == pid:
            try:
                self._proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout_s
        while _pid_alive(pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def _cleanup(self) -> None:
        self.state_file.unlink(missing_ok=True)
        if not self.keep:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def stop(self) -> bool:
        """Stop the broker of this run directory; False if none was running."""
        current = self.status()
        if current.pid is None:
            self._cleanup()
            return False
        was_running = current.running
        if was_running:
            self.echo(f"stopping broker pid {current.pid} at {current.bootstrap}")
            if not self._terminate(current.pid):
                raise BrokerError(f"broker pid {current.pid} could not be stopped")
        self._cleanup()
        self._proc = None
        return was_running

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _die_with_parent(parent_pid: int) -> Callable[[], None] | None:
    """A preexec_fn asking Linux to SIGTERM the child when its parent thread dies."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def _heap_mb(heap: str) -> int:
    text = heap.strip().lower()
    units = {"k": 1 / 1024, "m": 1, "g": 1024}
    if text and text[-1] in units:
        return max(1, int(float(text[:-1]) * units[text[-1]]))
    return max(1, int(text) // (1024 * 1024))


@contextlib.contextmanager
def local_kafka(run_dir: Path | None = None, timeout_s: float = 60.0, keep: bool = False) -> Iterator[str]:
    """``with local_kafka() as bootstrap:`` — a broker for the duration of the block."""
    broker = LocalKafkaBroker(run_dir=run_dir or default_run_dir(), keep=keep)
    bootstrap = broker.start(timeout_s)
    try:
        yield bootstrap
    finally:
        broker.stop()
