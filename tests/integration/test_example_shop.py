"""The tutorial's example, end to end, as its reader runs it: `jobledger dev` on
PostgreSQL with the shop's handlers, `jobledger apply` of its schedule, and the shop's
web service placing an order whose receipt is enqueued in the order's transaction and
waited for."""

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from tests.ports import free_port

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli

ROOT = Path(__file__).resolve().parents[2]
URL_LINE = re.compile(r"dashboard at (http://\S+)/ui")
LOGIN_LINE = re.compile(r"log in as '([^']+)' with the password '([^']+)'")
START_TIMEOUT = 30.0


@contextmanager
def _process(args: list[str], env: Mapping[str, str], logs: Path, name: str) -> Iterator[Path]:
    """A child process whose output goes to a file (a pipe could fill up); stopped with
    SIGTERM at the end of the block."""
    out = logs / f"{name}.txt"
    with out.open("w") as sink:
        process = subprocess.Popen(  # noqa: S603 (this interpreter, fixed arguments)
            [sys.executable, *args], cwd=ROOT, env=dict(env), stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        yield out
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _read_until(log: Path, pattern: re.Pattern[str]) -> "re.Match[str]":
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        found = pattern.search(log.read_text())
        if found:
            return found
        time.sleep(0.1)
    pytest.fail(f"{log.name} did not show {pattern.pattern!r}:\n{log.read_text()[-3000:]}")


def _answering(url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=2)
        except httpx.TransportError:
            time.sleep(0.1)
            continue
        return
    pytest.fail(f"{url} did not answer:\n{log.read_text()[-3000:]}")


def _token(api: str, username: str, password: str) -> str:
    """An operator token, made as the tutorial says: sign in, then POST /api/v1/tokens."""
    with httpx.Client(base_url=api, timeout=30) as browser:
        signed_in = browser.post(
            "/api/v1/auth/login", json={"username": username, "password": password}
        )
        assert signed_in.status_code == 200, signed_in.text
        made = browser.post(
            "/api/v1/tokens",
            json={"name": "shop", "role": "operator"},
            headers={"X-CSRF-Token": signed_in.json()["csrf_token"]},
        )
        assert made.status_code == 201, made.text
        secret: str = made.json()["secret"]
        return secret


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_the_shop_runs_from_the_tutorial(
    postgres_url: str, jobledger_cli: "JobledgerCli", tmp_path: Path
) -> None:
    """If jobledger runs with the shop's handlers, its schedule is applied and the shop
    takes an order, then the plan creates the daily job (and its TOML twin is the same
    job), and the order's receipt, enqueued in the order's transaction, is sent and its
    result comes back to the shop."""
    api_port, shop_port = free_port(), free_port()
    base = jobledger_cli.environment(
        database_url=postgres_url, handlers="examples.shop.jobs", api_port=str(api_port)
    ) | {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with _process(["-m", "jobledger.cli", "dev", "--no-demo"], base, tmp_path, "dev") as dev:
        api = _read_until(dev, URL_LINE)[1]
        username, password = _read_until(dev, LOGIN_LINE).groups()
        client_env = base | {
            "JOBLEDGER_URL": api,
            "JOBLEDGER_TOKEN": _token(api, username, password),
        }
        applied = jobledger_cli.run("apply", "--module", "examples.shop.jobs", env=client_env)
        assert applied.returncode == 0, applied.stderr
        assert "  + create    shop.daily_sales" in applied.stdout
        assert "Applied." in applied.stdout
        twin = jobledger_cli.run(
            "apply", "--file", str(ROOT / "examples/shop/jobs.toml"), "--dry-run", env=client_env
        )
        assert "  = unchanged shop.daily_sales" in twin.stdout, twin.stdout + twin.stderr
        shop_env = client_env | {"SHOP_DATABASE_URL": postgres_url}
        shop_args = ["-m", "uvicorn", "examples.shop.app:app", "--port", str(shop_port)]
        with _process(shop_args, shop_env, tmp_path, "shop") as shop_log:
            shop = f"http://127.0.0.1:{shop_port}"
            _answering(shop, shop_log)
            order = httpx.post(
                f"{shop}/orders", json={"email": "ada@example.com", "total_cents": 4200}
            )
            assert order.status_code == 201, order.text
            placed = order.json()
            receipt = httpx.get(
                f"{shop}/orders/{placed['order_id']}/receipt/{placed['receipt']}", timeout=60
            )
    assert receipt.status_code == 200, receipt.text + shop_log.read_text()[-2000:]
    assert receipt.json() == {
        "order_id": placed["order_id"],
        "sent_to": "ada@example.com",
    }
