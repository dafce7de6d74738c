"""`jobledger api` as a real process: the first admin, serving, stopping."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def environment(data_dir: Path, **settings: str) -> dict[str, str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("JOBLEDGER_") and k not in {"ADMIN_USERNAME", "ADMIN_PASSWORD"}
    }
    environ["JOBLEDGER_DATA_DIR"] = str(data_dir)
    environ |= {f"JOBLEDGER_{k.upper()}": v for k, v in settings.items()}
    return environ


def jobledger(*args: str, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 (our own entry point, fixed arguments)
        [sys.executable, "-m", "jobledger.cli", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_production_refuses_to_start_without_an_admin_password(tmp_path: Path) -> None:
    """If production mode starts with no admin and no admin password, then `jobledger api`
    exits with one line naming JOBLEDGER_ADMIN_PASSWORD, and serves nothing."""
    environ = environment(tmp_path, api_port=str(free_port()))
    assert jobledger("migrate", environ=environ).returncode == 0
    refused = jobledger("api", environ=environ)
    assert refused.returncode == 2
    assert "JOBLEDGER_ADMIN_PASSWORD" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_the_api_process_serves_the_admin_and_stops_on_sigterm(tmp_path: Path) -> None:
    """If `jobledger api` starts with an admin password, then that admin can sign in over
    HTTP, and SIGTERM stops the process cleanly."""
    port = free_port()
    password = "correct horse battery staple"
    environ = environment(tmp_path, api_port=str(port), admin_password=password)
    assert jobledger("migrate", environ=environ).returncode == 0
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
