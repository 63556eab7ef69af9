"""Ray beside local: what the same job costs on a warm one-machine Ray and on the local executor.

    python benchmarks/executors.py --factor 1 --runs 2 --json executors.json
    python benchmarks/executors.py --factor 0.05 --runs 1 --stages pretokenize-pretrain   # a smoke run
    python benchmarks/executors.py --factor 1 --runs 2 --nodes 2 --s3   # two nodes, data on S3

One Ray head (``ray start --head --num-cpus N``, token auth, all ports free ones) is started
once; its start-up and the first Ray jobs on it (a small pretokenize and a small
materialize-shuffle: what a cluster starts once per lifetime is paid there, such as the
detached actors of Ray Data, which prep's prepare jobs used before 2026-12-02) are reported
apart. Then each stage of ``benchmarks/scale.py`` that has an executor
(pretokenize pretrain and sft, decode-images, materialize-shuffle random and clump 64) runs
``--runs`` times on each executor, alternating, each a fresh ``prep`` process as a user runs
it: ``--executor local``, and ``--executor ray --ray-address <the head>``. The inputs are
``scale.py``'s at ``--factor``; its checks run after every job (rows + rejects == inputs,
tokens == the job's count, ``prep verify``), and both executors must give the same units.

``--nodes 2 --s3`` is the set-up of ``tests/test_multinode.py``: a second Ray node on this
machine (``ray start --address``, its own temp dir; the CPUs shared out among the nodes) and
the inputs, the tables and the outputs on a local S3 endpoint (``moto_server``) for both
executors. The endpoint's CPU is printed apart and not counted: on a cluster the object
store runs elsewhere.

CPU is counted on each side where it is spent:

- **command**: the ``prep`` process and every descendant, exactly (``benchmarks/measure.py``:
  the local executor's sandboxes are in it).
- **Ray daemons**: Ray's own processes (GCS, raylet, dashboard and agents, log monitor, Ray
  Data's detached actors), each one's CPU from the command's start until the job's workers are
  gone; they live throughout, so this is exact. Their idle rate, measured before the runs, is
  printed too: a cluster spends it whether or not a job runs.
- **Ray workers**: what the machine spent meanwhile (``/proc/stat``) less the command, the
  daemons and this process. Ray's worker processes cannot be counted one by one: the raylet
  does not wait for the workers it stops, so their CPU reaches no parent's total once they
  exit (measured: 32 tasks of 0.5 CPU-s showed 0.3 CPU-s that way). So the machine must be
  quiet: on each local run the same difference (the machine beyond the command and this
  process) is printed as the noise the Ray figures may hold.

The head is started under a child *subreaper* of this process, so everything Ray starts stays
in its subtree (and out of the command's).

Columns per stage and executor (medians over runs): wall s (process start to exit), CPU s of
the command, of Ray's workers and of Ray's daemons, and units per CPU-second with everything
counted. ``ray/local`` is Ray's units per CPU-second over local's (goal >= 0.8): ``all`` counts
the daemons, ``job`` leaves them out; with several runs, the range of that ratio run by run
follows (the same work's CPU moves by up to a quarter between runs on a shared 2-core machine).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402  (benchmarks/ is not a package)
import scale  # noqa: E402
from workdir import work_folder  # noqa: E402

STAGES = ("pretokenize-pretrain", "pretokenize-sft", "decode-images", "shuffle-random", "shuffle-clump64")
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- the Ray head
def reap(cmds: list[list[str]]) -> int:
    """The ``--_reap`` mode: become a child subreaper, run ``cmds`` in order (``ray start --head``, then
    ``ray start --address`` per further node), say ``ready``, then wait for every orphan handed here; on SIGTERM (sent by the benchmark, or by
    the kernel when the benchmark dies however it dies) stop everything below, then exit."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 or libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl failed")
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    for cmd in cmds:
        start = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if start.returncode:
            break
    print("ready" if start.returncode == 0 else f"failed {start.returncode}\n{start.stdout}", flush=True)
    while not stopping:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.05)
        except ChildProcessError:
            time.sleep(0.05)
    for sig in (signal.SIGTERM, signal.SIGKILL):  # ``ray stop`` would stop every Ray on the host: only what is below
        for p in psutil.Process().children(recursive=True):
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
        deadline = time.monotonic() + 5
        while psutil.Process().children() and time.monotonic() < deadline:
            try:
                os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            time.sleep(0.05)
    return 0


@dataclass
class Head:
    """A Ray head (and its further nodes) in the subtree of one reaper process (:func:`reap`), joined at ``address``."""

    reaper: subprocess.Popen
    address: str
    temp_dirs: list[str]
    idle_rate: float = 0.0  # CPU-s per second the machine spends with the head idle (measured in start)

    @classmethod
    def start(cls, cpus: int, nodes: int = 1) -> tuple["Head", float, float]:
        """Starts the head and ``nodes - 1`` more nodes on this machine (``cpus`` shared out among them, as
        ``tests/test_multinode.py`` does); returns it, its start-up wall seconds and CPU seconds (the
        machine's, until it settled)."""
        temp_dirs = [tempfile.mkdtemp(prefix="prep-exb-", dir="/tmp") for _ in range(nodes)]  # short: Ray's socket paths
        temp_dir, per_node = temp_dirs[0], max(1, cpus // nodes)
        port = _free_port()
        auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        scale.ENV.update(auth)  # every measured command joins with it (Ray 2.60 turns token auth on)
        env = dict(scale.ENV)
        cmd = [str(scale.PREP.parent / "ray"), "start", "--head", f"--num-cpus={per_node}", f"--port={port}",
               f"--dashboard-port={_free_port()}", f"--dashboard-agent-listen-port={_free_port()}",
               f"--dashboard-agent-grpc-port={_free_port()}", f"--runtime-env-agent-port={_free_port()}",
               f"--metrics-export-port={_free_port()}", "--dashboard-host=127.0.0.1", f"--temp-dir={temp_dir}",
               "--disable-usage-stats"]
        more = [[str(scale.PREP.parent / "ray"), "start", f"--address=127.0.0.1:{port}", f"--num-cpus={per_node}",
                 f"--temp-dir={d}", f"--node-manager-port={_free_port()}", f"--object-manager-port={_free_port()}",
                 f"--metrics-export-port={_free_port()}", f"--dashboard-agent-listen-port={_free_port()}",
                 f"--dashboard-agent-grpc-port={_free_port()}", f"--runtime-env-agent-port={_free_port()}",
                 "--disable-usage-stats"] for d in temp_dirs[1:]]
        t0, busy0 = time.perf_counter(), busy_cpu()
        reaper = subprocess.Popen([sys.executable, __file__, "--_reap", json.dumps([cmd, *more])], env=env, stdout=subprocess.PIPE,
                                  text=True, start_new_session=True)  # a Ctrl-C reaches the benchmark, whose exit stops the head
        head = cls(reaper, f"127.0.0.1:{port}", temp_dirs)
        said = reaper.stdout.readline() if reaper.stdout else ""
        if not said.startswith("ready"):
            head.stop()
            raise SystemExit(f"ray start failed: {said}{reaper.stdout.read() if reaper.stdout else ''}")
        wall = time.perf_counter() - t0
        head.idle_rate = 0.5  # until measured: the agents come up a few seconds after `ray start` returns
        head.settle()
        cpu = busy_cpu() - busy0
        t0, busy0, own0 = time.perf_counter(), busy_cpu(), own_cpu()
        time.sleep(10)
        head.idle_rate = (busy_cpu() - busy0 - (own_cpu() - own0)) / (time.perf_counter() - t0)
        return head, wall, cpu

    def processes(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.reaper.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def daemons_cpu(self) -> dict[int, float]:
        """CPU seconds so far of each of Ray's own processes in the head's subtree (daemons, agents, detached actors)."""
        seen: dict[int, float] = {}
        for p in self.processes():
            try:
                if _ray_own(p):
                    t = p.cpu_times()
                    seen[p.pid] = t.user + t.system
            except psutil.Error:
                continue
        return seen

    def settle(self, window_s: float = 2.0, above_idle: float = 0.15, limit_s: float = 60.0) -> None:
        """Waits until the machine is back to idle: over the last ``window_s`` it spent at most ``above_idle``
        CPU-s per second more than when idle (:attr:`idle_rate`), up to ``limit_s``. After a Ray job the
        raylet stops its workers and starts fresh idle ones a while later: that is the job's too."""
        deadline = time.monotonic() + limit_s
        samples = [(time.monotonic(), busy_cpu() - own_cpu())]
        while time.monotonic() < deadline:
            time.sleep(0.25)
            samples.append((time.monotonic(), busy_cpu() - own_cpu()))
            old = [s for s in samples if s[0] <= samples[-1][0] - window_s]
            if old and (samples[-1][1] - old[-1][1]) / (samples[-1][0] - old[-1][0]) <= self.idle_rate + above_idle:
                return

    def stop(self) -> None:
        """Stops every process of the head (:func:`reap` does it on SIGTERM)."""
        self.reaper.terminate()
        self.reaper.wait(timeout=60)
        for d in self.temp_dirs:
            shutil.rmtree(d, ignore_errors=True)


_RAY_OWN = ("gcs_server", "raylet", "dashboard", "log_monitor", "monitor.py", "ray.util.client.server",
            "ray::DashboardAgent", "ray::RuntimeEnvAgent",  # and Ray Data's detached actors (older prep, other jobs):
            "ray::_StatsActor", "ray::_AutoscalingCoordinatorActor", "ray::_UsageCollectionActor")


def _ray_own(p: psutil.Process) -> bool:
    """Whether ``p`` is one of Ray's own processes (daemons, agents, detached actors), not a worker or a sandbox."""
    line = " ".join(_cmdline(p))
    return p.pid != os.getpid() and any(k in line for k in _RAY_OWN) and "default_worker" not in line


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def busy_cpu() -> float:
    """CPU seconds this machine has spent running anything (``/proc/stat``: user, nice, system, irq, softirq)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:8]]
    return (ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6]) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    """This process's own CPU seconds (its sampling and settling; children not included)."""
    t = os.times()
    return t.user + t.system


# ----------------------------------------------------------------------------- the S3 endpoint
@dataclass
class S3Endpoint:
    """A ``moto_server`` on 127.0.0.1 holding inputs and outputs (``--s3``), as in the tests; what it spends
    is the object store's, not a job's: counted apart (it runs throughout, so exactly)."""

    proc: subprocess.Popen
    bucket: str

    @classmethod
    def start(cls) -> "S3Endpoint":
        """Starts it and makes a bucket; its ``AWS_*`` variables go to every command and Ray node (set before the head)."""
        port = _free_port()
        proc = subprocess.Popen([str(scale.PREP.parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1"}
        scale.ENV.update(env)
        os.environ.update(env)  # this process's checks and uploads
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    proc.kill()
                    raise SystemExit("moto_server did not start")
                time.sleep(0.2)
        import boto3

        bucket = f"prep-bench-{secrets.token_hex(4)}"
        boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1").create_bucket(Bucket=bucket)
        return cls(proc, bucket)

    def upload(self, local: str, name: str) -> str:
        """Copies the folder ``local`` to ``s3://BUCKET/inputs/NAME``; returns that URI."""
        import fsspec

        fs = fsspec.filesystem("s3")
        fs.put(local.rstrip("/") + "/", f"{self.bucket}/inputs/{name}/", recursive=True)
        return f"s3://{self.bucket}/inputs/{name}"

    @property
    def root(self) -> str:
        return f"s3://{self.bucket}/out"

    def cpu(self) -> float:
        t = psutil.Process(self.proc.pid).cpu_times()
        return t.user + t.system

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


# ----------------------------------------------------------------------------- runs
@dataclass
class Run:
    """One stage on one executor, once."""

    stage: str
    executor: str
    units: int
    unit: str
    wall_s: float
    command_cpu_s: float
    ray_workers_cpu_s: float = 0.0
    ray_daemons_cpu_s: float = 0.0
    other_cpu_s: float = 0.0  # local runs: what else the machine spent meanwhile (not counted)
    store_cpu_s: float = 0.0  # the S3 endpoint meanwhile (``--s3``; not counted: a cluster's object store runs elsewhere)

    @property
    def cpu_s(self) -> float:
        return self.command_cpu_s + self.ray_workers_cpu_s + self.ray_daemons_cpu_s

    @property
    def job_cpu_s(self) -> float:
        return self.command_cpu_s + self.ray_workers_cpu_s


def run_once(stage: str, executor: str, head: Head, out: Path, text: dict, images: dict, facts: dict,
             store: S3Endpoint | None = None) -> Run:
    """``stage`` on ``executor``, measured on both sides and checked (``scale.run_stage``).

    What the machine spent beyond the command and this process is Ray's (its workers, sandboxes
    and daemons) on Ray; on the local executor it is noise (the idle head, anything else running),
    kept in ``other_cpu_s`` to show how much the Ray figures may hold.
    """
    flags = ("--executor", "local") if executor == "local" else ("--executor", "ray", "--ray-address", head.address)
    daemons0, busy0, own0 = head.daemons_cpu(), busy_cpu(), own_cpu()
    store0 = store.cpu() if store else 0.0
    ended: dict = {}

    def settled() -> None:  # before the checks: their processes (inspect, verify) are not the job's
        head.settle()
        ended.update(daemons=head.daemons_cpu(), busy=busy_cpu() - busy0 - (own_cpu() - own0),
                     store=store.cpu() - store0 if store else 0.0)

    m, units, unit, _, _ = scale.run_stage(stage, out, text, images, facts, executor=flags, apart=head.reaper.pid,
                                           after=settled, store=store.root if store else None)
    daemons1, other = ended["daemons"], ended["busy"] - m.cpu_s - ended["store"]
    if executor == "local":
        return Run(stage, executor, units, unit, m.wall_s, m.cpu_s, other_cpu_s=other, store_cpu_s=ended["store"])
    daemons = sum(cpu - daemons0.get(pid, 0.0) for pid, cpu in daemons1.items())
    return Run(stage, executor, units, unit, m.wall_s, m.cpu_s, other - daemons, daemons, store_cpu_s=ended["store"])


def warm_up(head: Head, work: Path) -> dict:
    """The cluster's first Ray jobs (a small pretokenize, then a small materialize): reported apart."""
    text = scale.text_inputs(work, 0.01)
    out = work / "warm"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    facts: dict = {}
    first = run_once("pretokenize-pretrain", "ray", head, out, text, {}, facts)
    second = run_once("shuffle-random", "ray", head, out, text, {}, facts)
    shutil.rmtree(out, ignore_errors=True)
    return {"pretokenize": asdict(first), "materialize": asdict(second)}


def median_run(runs: list[Run]) -> Run:
    """The field-wise median of ``runs`` (one stage, one executor)."""
    def med(field: str) -> float:
        return statistics.median(getattr(r, field) for r in runs)

    first = runs[0]
    return Run(first.stage, first.executor, first.units, first.unit, med("wall_s"), med("command_cpu_s"),
               med("ray_workers_cpu_s"), med("ray_daemons_cpu_s"), med("other_cpu_s"), med("store_cpu_s"))


HEADER = (f"{'stage':<21} {'executor':<8} {'units':>14} {'wall s':>7} {'cmd CPU':>8} {'Ray wrk':>8} {'Ray dmn':>8} "
          f"{'units/CPU-s':>12} {'ray/local all':>13} {'job':>6} {'wall x':>7}")


def pair_ratios(runs: list[Run], stage: str) -> list[float]:
    """Ray's units per CPU-second over local's, run by run (each Ray run beside the local run before it)."""
    local = [r for r in runs if r.stage == stage and r.executor == "local"]
    ray = [r for r in runs if r.stage == stage and r.executor == "ray"]
    return [(b.units / b.cpu_s) / (a.units / a.cpu_s) for a, b in zip(local, ray)]


def format_pair(local: Run, ray: Run, pairs: list[float] = ()) -> str:
    lines = []
    for r in (local, ray):
        rate = r.units / r.cpu_s
        tail = ""
        if r is ray:
            tail = (f" {(ray.units / ray.cpu_s) / (local.units / local.cpu_s):>13.2f}"
                    f" {(ray.units / ray.job_cpu_s) / (local.units / local.cpu_s):>6.2f} {ray.wall_s / local.wall_s:>7.2f}")
        if r is local:
            tail = f"   (the rest of the machine meanwhile: {local.other_cpu_s:.1f} CPU-s)"
        if r is ray and len(pairs) > 1:
            tail += f"   (pairs {min(pairs):.2f}-{max(pairs):.2f})"
        if r.store_cpu_s:
            tail += f"   (the S3 endpoint: {r.store_cpu_s:.1f} CPU-s, not counted)"
        lines.append(f"{r.stage:<21} {r.executor:<8} {r.units:>10,} {'tok' if r.unit == 'token' else 'img'} {r.wall_s:>7.1f} "
                     f"{r.command_cpu_s:>8.1f} {r.ray_workers_cpu_s:>8.1f} {r.ray_daemons_cpu_s:>8.1f} {rate:>12,.0f}{tail}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factor", type=float, default=1.0, help="size, times GSM8K x16 (scale.py's inputs; default 1)")
    ap.add_argument("--runs", type=int, default=2, help="runs per stage and executor, alternating (default 2)")
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 1,
                    help="the cluster's CPUs, shared out among its nodes (default: this machine's)")
    ap.add_argument("--nodes", type=int, default=1, help="Ray nodes on this machine (default 1; 2: tests/test_multinode.py's set-up)")
    ap.add_argument("--s3", action="store_true", help="inputs and outputs on a local S3 endpoint (moto_server), for both executors")
    ap.add_argument("--stages", default=",".join(STAGES), help=f"a subset of {','.join(STAGES)}")
    ap.add_argument("--work", default="/tmp/prep-bench-executors", help="inputs (cached) and outputs")
    ap.add_argument("--json", help="write every run to this file")
    ap.add_argument("--_reap", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._reap:
        return reap(json.loads(args._reap))
    wanted = [s.strip() for s in args.stages.split(",") if s.strip()]
    if set(wanted) - set(STAGES) or args.runs < 1 or args.factor <= 0 or not 1 <= args.nodes <= args.cpus:
        ap.error(f"--stages among {list(STAGES)}, --runs >= 1, --factor > 0, 1 <= --nodes <= --cpus")
    work = work_folder(args.work)
    measure._become_subreaper()  # before the head starts: nothing of the head is ever handed to this process
    text, images = scale.text_inputs(work, args.factor), scale.image_inputs(work, args.factor)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; factor {args.factor:g}; work {work}; "
          f"{args.nodes} Ray node(s); data {'on a local S3 endpoint' if args.s3 else 'on local disk'}", flush=True)
    store = S3Endpoint.start() if args.s3 else None  # before the head: its nodes inherit the endpoint's variables
    if store:
        text = {**text, **{fmt: store.upload(text[fmt], fmt) for fmt in ("pretrain", "sft")}}
        images = {**images, "dir": store.upload(images["dir"], "images")}
    head, start_wall, start_cpu = Head.start(args.cpus, args.nodes)
    runs: list[Run] = []
    try:
        idle0, t0 = head.daemons_cpu(), time.perf_counter()
        time.sleep(5)
        idle_rate = sum(cpu - idle0.get(pid, 0.0) for pid, cpu in head.daemons_cpu().items()) / (time.perf_counter() - t0)
        print(f"ray start: {start_wall:.1f} s wall, {start_cpu:.1f} CPU-s; idle: Ray's daemons {idle_rate:.3f} CPU-s per second, "
              f"the whole machine {head.idle_rate:.3f}", flush=True)
        warm = warm_up(head, work)
        for name, r in warm.items():
            print(f"first Ray {name} job on the cluster (0.01x): {r['wall_s']:.1f} s wall, "
                  f"{r['command_cpu_s'] + r['ray_workers_cpu_s'] + r['ray_daemons_cpu_s']:.1f} CPU-s", flush=True)
        out = work / "out"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        facts: dict = {}
        if any(s.startswith("shuffle-") for s in wanted) and "pretokenize-pretrain" not in wanted:
            scale.run_stage("pretokenize-pretrain", out, text, images, facts, store=store.root if store else None)  # their input
        print(HEADER, flush=True)
        for stage in [s for s in STAGES if s in wanted]:
            for _ in range(args.runs):
                for executor in ("local", "ray"):
                    runs.append(run_once(stage, executor, head, out, text, images, facts, store))
            local = median_run([r for r in runs if r.stage == stage and r.executor == "local"])
            ray = median_run([r for r in runs if r.stage == stage and r.executor == "ray"])
            if {r.units for r in runs if r.stage == stage} != {local.units}:
                raise scale.CheckFailed(f"{stage}: the executors disagree on units: {sorted({r.units for r in runs if r.stage == stage})}")
            print(format_pair(local, ray, pair_ratios(runs, stage)), flush=True)
    except scale.CheckFailed as exc:
        print(f"check failed: {exc}", file=sys.stderr)
        return 1
    finally:
        head.stop()
        if store:
            store.stop()
    if args.json:
        Path(args.json).write_text(json.dumps({"cpus": os.cpu_count(), "factor": args.factor, "nodes": args.nodes,
                                               "s3": args.s3, "ray_start_s": start_wall,
                                               "ray_start_cpu_s": start_cpu, "idle_cpu_per_s": idle_rate,
                                               "idle_machine_cpu_per_s": head.idle_rate, "warm_up": warm,
                                               "runs": [asdict(r) for r in runs]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
