"""A real Slurm on localhost for the tests: munge, slurmctld and slurmd (Debian's slurm-wlm), one
node with this machine's CPUs, from a generated slurm.conf; with MariaDB and slurmdbd where they
are installed, so `sacct` answers too. Started as root, as CI runs; `start` returns why not
instead, for the tests to skip with. `./run test` installs the packages (apt-get).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _which(name: str) -> str | None:
    return shutil.which(name) or next((f"{d}/{name}" for d in SBIN if os.access(f"{d}/{name}", os.X_OK)), None)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@dataclass
class Cluster:
    root: Path
    conf: Path
    accounting: bool  # slurmdbd answers: sacct works
    pids: list[Path] = field(default_factory=list)  # pid files of the daemons started, stopped in reverse
    munged: Path | None = None  # its pid file, when this fixture started munged

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *cmd: str, cwd: Path | None = None, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(cmd), cwd=cwd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode:
            raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr or proc.stdout}")
        return proc

    def queue(self) -> list[str]:
        """squeue's lines: job id, name, state."""
        return [line for line in self.run("squeue", "-h", "-o", "%i %j %T").stdout.splitlines() if line.strip()]

    def wait_empty(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while self.queue():
            if time.monotonic() > deadline:
                raise AssertionError(f"jobs still queued after {timeout:g}s: {self.queue()}")
            time.sleep(1)

    def stop(self) -> None:
        for pid_file in reversed(self.pids):
            _kill(pid_file)
        if self.munged is not None:
            _kill(self.munged)


def _kill(pid_file: Path) -> None:
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def _munge_ok() -> bool:
    munge, unmunge = _which("munge"), _which("unmunge")
    if not munge or not unmunge:
        return False
    token = subprocess.run([munge, "-n"], capture_output=True, text=True)
    return token.returncode == 0 and subprocess.run([unmunge], input=token.stdout, capture_output=True, text=True).returncode == 0


SLURM_CONF = """ClusterName=harness
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
KillWait=10
{accounting}
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

SLURMDBD_CONF = """AuthType=auth/munge
DbdHost=localhost
DbdPort={dbd_port}
SlurmUser=root
LogFile={root}/slurmdbd.log
PidFile={root}/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db_port}
StorageUser=root
StorageLoc=slurm_acct_db
"""


def _wait(check: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.5)
    return False


def _accounting(root: Path, cluster: Cluster, dbd_port: int, db_port: int) -> bool:
    """MariaDB and slurmdbd, where installed: `sacct` then answers. False (no accounting) on any failure."""
    install, mariadbd, slurmdbd = _which("mariadb-install-db"), _which("mariadbd"), _which("slurmdbd")
    if not (install and mariadbd and slurmdbd):
        return False
    data = root / "mysql"
    made = subprocess.run(
        [install, "--user=root", f"--datadir={data}", "--auth-root-authentication-method=normal"], capture_output=True, text=True
    )
    if made.returncode:
        return False
    log = (root / "mariadb.log").open("w")
    subprocess.Popen(
        [
            mariadbd,
            "--user=root",
            f"--datadir={data}",
            f"--socket={root}/mysql.sock",
            "--bind-address=127.0.0.1",
            f"--port={db_port}",
            f"--pid-file={root}/mariadb.pid",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    cluster.pids.append(root / "mariadb.pid")
    if not _wait(lambda: (root / "mysql.sock").exists(), 30):
        return False
    conf = root / "slurmdbd.conf"
    conf.write_text(SLURMDBD_CONF.format(root=root, dbd_port=dbd_port, db_port=db_port))
    conf.chmod(0o600)
    if subprocess.run([slurmdbd], env=cluster.env).returncode:
        return False
    cluster.pids.append(root / "slurmdbd.pid")

    def registered() -> bool:
        return cluster.run("sacctmgr", "-i", "add", "cluster", "harness", check=False).returncode == 0

    return _wait(registered, 30)


def start(root: Path) -> Cluster | str:
    """A running one-node cluster under `root`, or the reason it cannot start."""
    missing = [name for name in ("slurmctld", "slurmd", "sbatch", "munged") if not _which(name)]
    if missing:
        return f"{', '.join(missing)} not installed: apt-get install -y slurm-wlm munge (./run test does)"
    if os.geteuid() != 0:
        return "the local Slurm starts as root (as CI runs); run the tests as root"
    for folder in ("state", "spool"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    cluster = Cluster(root, root / "slurm.conf", accounting=False)
    if not _munge_ok():
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        pid = root / "munged.pid"
        started = subprocess.run([str(_which("munged")), "--force", f"--pid-file={pid}"], capture_output=True, text=True)
        if started.returncode or not _wait(_munge_ok, 10):
            return f"munged did not start: {started.stderr.strip()[-300:] or 'munge -n | unmunge fails'}"
        cluster.munged = pid
    ctld_port, d_port, dbd_port, db_port = _free_ports(4)
    host = socket.gethostname().split(".")[0]
    (root / "slurmdbd.conf").unlink(missing_ok=True)
    accounting = f"AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\nAccountingStoragePort={dbd_port}"
    conf = dict(root=root, host=host, ctld_port=ctld_port, d_port=d_port, cpus=os.cpu_count() or 1)
    cluster.conf.write_text(SLURM_CONF.format(**conf, accounting=accounting + "\nJobAcctGatherType=jobacct_gather/linux"))
    cluster.accounting = _accounting(root, cluster, dbd_port, db_port)
    if not cluster.accounting:  # no sacct: the cluster runs jobs all the same
        cluster.conf.write_text(SLURM_CONF.format(**conf, accounting="AccountingStorageType=accounting_storage/none"))
    for daemon in ("slurmctld", "slurmd"):
        proc = subprocess.run([str(_which(daemon))], env=cluster.env, capture_output=True, text=True)
        if proc.returncode:
            cluster.stop()
            return f"{daemon} did not start: {proc.stderr.strip()[-300:]}"
        cluster.pids.append(root / f"{daemon}.pid")

    def idle() -> bool:
        states = cluster.run("sinfo", "-h", "-o", "%T", check=False).stdout.split()
        return bool(states) and all(s in ("idle", "mixed", "allocated") for s in states)

    if not _wait(idle, 30):
        log = (root / "slurmd.log").read_text()[-400:] if (root / "slurmd.log").exists() else ""
        cluster.stop()
        return f"the local node never became idle: {log}"
    return cluster
