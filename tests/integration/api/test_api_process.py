"""`jobledger api` as a real process: the first admin, serving, stopping."""

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from tests.ports import free_port

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli


def test_production_refuses_to_start_without_an_admin_password(
    tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If production mode starts with no admin and no admin password, then `jobledger api`
    exits with one line naming JOBLEDGER_ADMIN_PASSWORD, and serves nothing."""
    environ = jobledger_cli.environment(data_dir=str(tmp_path), api_port=str(free_port()))
    assert jobledger_cli.run("migrate", env=environ).returncode == 0
    refused = jobledger_cli.run("api", env=environ)
    assert refused.returncode == 2
    assert "JOBLEDGER_ADMIN_PASSWORD" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_the_api_process_serves_the_admin_and_stops_on_sigterm(
    tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If `jobledger api` starts with an admin password, then that admin can sign in over
    HTTP, and SIGTERM stops the process cleanly."""
    port = free_port()
    password = "correct horse battery staple"
    environ = jobledger_cli.environment(
        data_dir=str(tmp_path), api_port=str(port), admin_password=password
    )
    assert jobledger_cli.run("migrate", env=environ).returncode == 0
    process = subprocess.Popen(
        [sys.executable, "-m", "jobledger.cli", "api", "--with-projector"],
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail("the API did not come up")
            time.sleep(0.1)
        login = httpx.post(
            f"{url}/api/v1/auth/login", json={"username": "admin", "password": password}
        )
        assert login.status_code == 200, login.text
        assert login.json()["role"] == "admin"
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
