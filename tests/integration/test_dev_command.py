"""`jobledger dev` as a real process, and `jobledger seed` on PostgreSQL."""

import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from tests.ports import free_port

from jobledger.bootstrap import bootstrap
from jobledger.domain.job import job_id_for_key
from jobledger.infra.settings import load_settings
from jobledger.services.demo import KEY_PREFIX, demo_job_ids

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 20.0
URL_LINE = re.compile(r"dashboard at (http://\S+)/ui")
COMPLETED = "/api/v1/executions?status=completed&limit=200"
EPOCH = re.compile(r"leader_epoch=(\d+)")
LOGIN_LINE = re.compile(r"log in as '([^']+)' with the password '([^']+)'")


def readme_command(data_dir: Path) -> list[str]:
    """What `make run` (the README's first command) runs once set up, with its data
    folder at ``data_dir``: the last line `make -n` prints, made absolute."""
    dry_run = subprocess.run(  # noqa: S603 (a fixed argument list)
        [
            shutil.which("make") or "make",
            "-s",
            "-n",
            "-C",
            str(ROOT),
            "run",
            f"DATA_DIR={data_dir}",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    program, *arguments = shlex.split(dry_run.stdout.strip().splitlines()[-1])
    assert Path(program).name == "jobledger", dry_run.stdout
    return [str(ROOT / program), *arguments]


class DevProcess:
    """A `jobledger dev` subprocess; its output goes to files (a pipe could fill up)."""

    def __init__(self, data_dir: Path, port: int, logs: Path, environ: dict[str, str]) -> None:
        self.stdout = logs / "stdout.txt"
        self.stderr = logs / "stderr.txt"
        environ = environ | {"JOBLEDGER_API_PORT": str(port)}
        with self.stdout.open("w") as out, self.stderr.open("w") as err:
            self.process = subprocess.Popen(  # noqa: S603 (the README's command, as make runs it)
                readme_command(data_dir), cwd=logs, env=environ, stdout=out, stderr=err, text=True
            )

    def wait_for_login(self) -> tuple[str, str, str]:
        """The dashboard's base URL, the username and the password it printed."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            text = self.stdout.read_text()
            url, login = URL_LINE.search(text), LOGIN_LINE.search(text)
            if url and login:
                return url.group(1), login.group(1), login.group(2)
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        pytest.fail(f"no dashboard URL printed: {text}\n{self.stderr.read_text()[-3000:]}")

    def interrupt(self) -> tuple[int, str]:
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(timeout=30)
        return code, self.stderr.read_text()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@contextmanager
def dev_process(data_dir: Path, logs: Path, environ: dict[str, str]) -> Iterator[DevProcess]:
    logs.mkdir()
    process = DevProcess(data_dir, free_port(), logs, environ)
    try:
        yield process
    finally:
        process.kill()


@contextmanager
def signed_in(url: str, username: str, password: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=10) as client:
        body = {"username": username, "password": password}
        login = client.post("/api/v1/auth/login", json=body)
        assert login.status_code == 200, login.text
        client.headers["X-CSRF-Token"] = login.json()["csrf_token"]
        yield client


def poll(client: httpx.Client, path: str, *, until: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        body = client.get(path).json()
        if until(body):
            return body
        if time.monotonic() > deadline:
            pytest.fail(f"{path} did not get there within {timeout} s: {body}")
        time.sleep(0.1)


def job_ids(client: httpx.Client) -> list[str]:
    page = poll(client, "/api/v1/jobs?limit=200", until=lambda b: b["total"] >= len(demo_job_ids()))
    return sorted(item["id"] for item in page["items"])


def run_first_start(data_dir: Path, logs: Path, environ: dict[str, str]) -> tuple[list[str], str]:
    """Start, see the demo jobs and the one-shot among them run by itself, run the
    manual one to completion, stop: (job ids, the triggered execution's id)."""
    with dev_process(data_dir, logs, environ) as dev:
        url, username, password = dev.wait_for_login()
        with signed_in(url, username, password) as client:
            ids = job_ids(client)
            assert ids == sorted(str(i) for i in demo_job_ids())
            welcome = str(demo_job_ids()[-1])
            poll(client, COMPLETED, until=lambda b: welcome in {i["job_id"] for i in b["items"]})
            manual = job_id_for_key(KEY_PREFIX + "echo-manual")
            triggered = client.post(f"/api/v1/jobs/{manual}/trigger")
            assert triggered.status_code == 202, triggered.text
            execution = triggered.json()["id"]
            poll(client, COMPLETED, until=lambda b: execution in {i["id"] for i in b["items"]})
        code, stderr = dev.interrupt()
    assert code == 0, stderr
    assert "Traceback" not in stderr
    return ids, execution


def test_dev_runs_everything_and_keeps_it_across_a_restart(
    tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If `jobledger dev` starts in a fresh folder, then it prints a dashboard URL and a
    login that work, lists the demo jobs, runs a triggered one to completion, logs one
    leader election (epoch 1) and stops cleanly on SIGINT; and if it starts again,
    then every job and the completed execution are still there, with no demo job added
    twice, under the next epoch."""
    data_dir = tmp_path / "data"
    environ = jobledger_cli.environment()
    ids, execution = run_first_start(data_dir, tmp_path / "first", environ)
    assert elections(tmp_path / "first") == ["1"]
    with dev_process(data_dir, tmp_path / "second", environ) as dev:
        url, username, password = dev.wait_for_login()
        with signed_in(url, username, password) as client:
            assert job_ids(client) == ids
            completed = client.get(COMPLETED).json()
            assert execution in {item["id"] for item in completed["items"]}
        code, stderr = dev.interrupt()
    assert code == 0, stderr
    assert "Traceback" not in stderr
    assert "created" not in (tmp_path / "second" / "stdout.txt").read_text()
    assert elections(tmp_path / "second") == ["2"]


def elections(logs: Path) -> list[str]:
    """The epochs of the ``leader.elected`` lines a dev process logged, in order."""
    lines = (logs / "stderr.txt").read_text().splitlines()
    return [
        found.group(1)
        for line in lines
        if "leader.elected" in line and (found := EPOCH.search(line)) is not None
    ]


def test_seed_twice_on_postgres_creates_the_demo_jobs_once(
    postgres_url: str, jobledger_cli: "JobledgerCli"
) -> None:
    """If `jobledger seed` runs twice on PostgreSQL, then the first run creates every
    demo job, and the second finds them all and writes no event."""
    first = jobledger_cli.run("seed", env={"JOBLEDGER_DATABASE_URL": postgres_url})
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("created ") == len(demo_job_ids()), first.stdout
    settings = load_settings({}, test_handlers="true", database_url=postgres_url)
    with bootstrap(settings) as container:
        head = container.head()
        for job_id in demo_job_ids():
            assert not container.ledger.get_job(job_id).deleted
    second = jobledger_cli.run("seed", env={"JOBLEDGER_DATABASE_URL": postgres_url})
    assert second.returncode == 0, second.stderr
    assert second.stdout.count("found ") == len(demo_job_ids()), second.stdout
    with bootstrap(settings) as container:
        assert container.head() == head
