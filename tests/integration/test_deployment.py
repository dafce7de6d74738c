"""The deployment files and the production topology.

The Procfile, docker-compose.yml, the Prometheus rules and the Grafana dashboard must
name real `jobledger` commands and real metrics, and the production roles must work
together as separate processes on PostgreSQL and Redis, as the Procfile runs them.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import psycopg
import pytest
import yaml
from tests.conftest import missing_service
from tests.ports import free_port
from tests.roles import (
    ADMIN_PASSWORD,
    Deployment,
    Samples,
    admin_client,
    launch,
    parse,
    total,
    wait_for,
    wait_until_serving,
)

from jobledger.cli import build_parser
from jobledger.infra.metrics import Metrics

if TYPE_CHECKING:
    from tests.conftest import JobledgerCli

ROOT = Path(__file__).resolve().parents[2]
METRIC = re.compile(r"\bjobledger_[a-z0-9_]+\b")
ROLES = ("api", "scheduler", "worker", "projector")

# Role processes on the shared PostgreSQL: one such module at a time (its connections).
pytestmark = pytest.mark.xdist_group("roles")


# ---- what the files name -----------------------------------------------------------


def exported_names() -> set[str]:
    """Every sample name the registry can export, with the suffixes Prometheus sees
    (a counter family ``x`` is scraped as ``x_total``, a histogram as ``x_bucket``...)."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "gauge": ("",),
    }
    return {
        family.name + suffix
        for family in Metrics().registry.collect()
        for suffix in suffixes[family.type]
    }


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    choices: dict[str, argparse.ArgumentParser] = action.choices
    return choices


def procfile() -> dict[str, tuple[dict[str, str], list[str]]]:
    """Each process type: the variables its `env` prefix sets, and the command after it."""
    entries: dict[str, tuple[dict[str, str], list[str]]] = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, _, command = line.partition(":")
        words = shlex.split(command)
        if words[:1] == ["exec"]:
            words = words[1:]
        if words[:1] == ["env"]:
            words = words[1:]
        environ: dict[str, str] = {}
        while words and "=" in words[0]:
            key, _, value = words.pop(0).partition("=")
            environ[key] = value
        assert name.strip() not in entries, f"process type {name!r} twice"
        entries[name.strip()] = (environ, words)
    return entries


def expressions(node: Any) -> Iterator[str]:
    """Every ``expr`` string anywhere in a JSON document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item)


def unknown_metrics(exprs: list[str]) -> dict[str, set[str]]:
    known = exported_names()
    found = {e: set(METRIC.findall(e)) for e in exprs}
    return {e: names - known for e, names in found.items() if not names or names - known}


def load_yaml(name: str) -> Any:
    return yaml.safe_load((ROOT / name).read_text())


def test_every_procfile_process_is_a_real_jobledger_role() -> None:
    """If the Procfile is read as a Procfile runner reads it, then it starts one api, two
    schedulers, three workers and one projector, each a command the parser accepts, each
    with a metrics port of its own, and leaves migrate to the release step."""
    entries = procfile()
    known = subcommands()
    roles: list[str] = []
    for name, (environ, words) in entries.items():
        assert words[0] == "jobledger", name
        assert words[1] in known, f"{name}: {words[1]!r} is no jobledger command"
        build_parser().parse_args(words[1:])
        assert set(environ) <= {"JOBLEDGER_METRICS_PORT"}, name
        roles.append(words[1])
    assert sorted(roles) == sorted(["api", "scheduler", "scheduler", *["worker"] * 3, "projector"])
    ports = [e["JOBLEDGER_METRICS_PORT"] for e, w in entries.values() if w[1] != "api"]
    assert len(ports) == len(set(ports)) == 6
    assert "jobledger migrate" in (ROOT / "Procfile").read_text()

    scraped = {
        target
        for job in load_yaml("deploy/prometheus.yml")["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    }
    assert scraped == {"127.0.0.1:8000"} | {f"127.0.0.1:{p}" for p in ports}


def test_the_alert_rules_name_only_exported_metrics() -> None:
    """If the alert rules are loaded, then they hold the expected alerts, each with a
    summary, and every expression names only metrics that jobledger exports."""
    document = load_yaml("deploy/prometheus-alerts.yml")
    rules = {r["alert"]: r for group in document["groups"] for r in group["rules"]}
    assert set(rules) == {
        "JobledgerMissedFires",
        "JobledgerNoLeader",
        "JobledgerProjectionLagHigh",
        "JobledgerEventsQuarantined",
        "JobledgerDeadLetterGrowth",
        "JobledgerBreakerOpen",
        "JobledgerStaleReports",
        "JobledgerDependencyDown",
        "JobledgerNotificationsFailing",
    }
    assert all(r["annotations"]["summary"] for r in rules.values())
    assert unknown_metrics([r["expr"] for r in rules.values()]) == {}
    assert "jobledger_fires_missed_total" in rules["JobledgerMissedFires"]["expr"]
    assert "sum(jobledger_leader) == 0" in rules["JobledgerNoLeader"]["expr"]
    assert rules["JobledgerNoLeader"]["for"] == "1m"
    assert "== 2" in rules["JobledgerBreakerOpen"]["expr"]  # 2 is open
    assert "jobledger_projection_quarantined_events" in rules["JobledgerEventsQuarantined"]["expr"]
    assert rules["JobledgerDependencyDown"]["expr"] == "jobledger_dependency_up == 0"
    assert load_yaml("deploy/prometheus.yml")["rule_files"] == ["prometheus-alerts.yml"]


def test_the_grafana_dashboard_charts_only_exported_metrics() -> None:
    """If the Grafana dashboard is loaded, then every query names only metrics that
    jobledger exports, and the signals an operator needs each have a chart."""
    dashboard = json.loads((ROOT / "deploy/grafana-dashboard.json").read_text())
    exprs = list(expressions(dashboard["panels"]))
    assert unknown_metrics(exprs) == {}
    charted = {name for e in exprs for name in METRIC.findall(e)}
    assert charted >= {
        "jobledger_fires_total",
        "jobledger_fire_lateness_seconds_bucket",
        "jobledger_fires_missed_total",
        "jobledger_leader",
        "jobledger_queue_depth",
        "jobledger_projection_lag_events",
        "jobledger_completions_total",
        "jobledger_execution_duration_seconds_bucket",
        "jobledger_schedule_to_start_seconds_bucket",
        "jobledger_dead_letters_total",
        "jobledger_breaker_state",
        "jobledger_worker_slots_in_use",
        "jobledger_http_requests_total",
        "jobledger_http_request_duration_seconds_bucket",
        "jobledger_events_appended_total",
    }
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


# The suffixes Prometheus adds to a family's name (as ``exported_names`` lists them).
SAMPLE_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def family_of(name: str) -> str:
    """The metric family a sample name belongs to (``x_total`` and ``x_bucket`` are ``x``)."""
    for suffix in SAMPLE_SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def dashboard_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel of a dashboard, those inside a collapsed row included."""
    for panel in panels:
        yield panel
        yield from dashboard_panels(panel.get("panels", []))


def overlap(a: dict[str, int], b: dict[str, int]) -> bool:
    """Whether two ``gridPos`` rectangles share a cell."""
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def test_the_grafana_dashboard_charts_every_metric_family() -> None:
    """If the Grafana dashboard is loaded, then every metric family jobledger exports is
    named by some panel's query, the panel ids are unique, and no two panels' grid
    rectangles overlap or leave the 24 columns."""
    dashboard = json.loads((ROOT / "deploy/grafana-dashboard.json").read_text())
    exported = {family_of(name) for name in exported_names()}
    charted = {
        family_of(name) for e in expressions(dashboard["panels"]) for name in METRIC.findall(e)
    }
    uncharted = sorted(exported - charted)
    assert not uncharted, f"no panel charts these metric families: {uncharted}"

    ids = [panel["id"] for panel in dashboard_panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    # A collapsed row's panels are laid out when it opens: the top level is the grid.
    placed = [(panel["id"], panel["gridPos"]) for panel in dashboard["panels"]]
    assert all(p["x"] >= 0 and p["y"] >= 0 and p["x"] + p["w"] <= 24 for _, p in placed)
    overlapping = [
        (first, second)
        for n, (first, a) in enumerate(placed)
        for second, b in placed[n + 1 :]
        if overlap(a, b)
    ]
    assert overlapping == [], f"panels whose gridPos overlap: {overlapping}"


def test_the_compose_file_runs_every_role_without_a_default_secret() -> None:
    """If docker-compose.yml is read, then PostgreSQL and Redis have health checks, each
    role under the `app` profile runs a real jobledger command with the database and
    Redis URLs, and the passwords come only from the environment."""
    text = (ROOT / "docker-compose.yml").read_text()
    services = load_yaml("docker-compose.yml")["services"]
    assert services["postgres"]["image"] == "postgres:15"
    assert services["redis"]["image"] == "redis:7"
    assert "healthcheck" in services["postgres"]
    assert "healthcheck" in services["redis"]
    known = subcommands()
    replicas: dict[str, int] = {}
    for name in ("migrate", *ROLES):
        service = services[name]
        assert service["profiles"] == ["app"], name
        assert service["command"][0] in known, name
        assert {"JOBLEDGER_DATABASE_URL", "JOBLEDGER_REDIS_URL"} <= set(service["environment"])
        replicas[service["command"][0]] = service.get("deploy", {}).get("replicas", 1)
    assert replicas == {"migrate": 1, "api": 1, "scheduler": 2, "worker": 3, "projector": 1}
    assert services["migrate"]["restart"] == "no"
    password = services["api"]["environment"]["JOBLEDGER_ADMIN_PASSWORD"]
    assert password.startswith("${JOBLEDGER_ADMIN_PASSWORD:?")
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith(
        "${POSTGRES_PASSWORD:?"
    )
    assert ADMIN_PASSWORD not in text


def test_prometheus_under_compose_scrapes_every_role() -> None:
    """If the compose file's `metrics` profile is read, then every scheduler, worker and
    projector serves metrics on the compose network at one port, and the Prometheus it
    starts scrapes each of those services and the API there and loads the alert rules."""
    services = load_yaml("docker-compose.yml")["services"]
    ports: set[int] = set()
    for name in ("scheduler", "worker", "projector"):
        environment = services[name]["environment"]
        assert environment["JOBLEDGER_METRICS_HOST"] == "0.0.0.0"  # noqa: S104 (in a container)
        ports.add(int(environment["JOBLEDGER_METRICS_PORT"]))
    assert len(ports) == 1
    prometheus = services["prometheus"]
    assert prometheus["profiles"] == ["metrics"]
    mounted = {v.split(":")[0].removeprefix("./"): v.split(":")[1] for v in prometheus["volumes"]}
    assert all((ROOT / source).is_file() for source in mounted)
    config = load_yaml("deploy/prometheus-compose.yml")
    assert mounted["deploy/prometheus-compose.yml"] == "/etc/prometheus/prometheus.yml"
    assert mounted["deploy/prometheus-alerts.yml"].endswith("/" + config["rule_files"][0])
    targets: dict[str, int] = {}
    for job in config["scrape_configs"]:
        for dns in job.get("dns_sd_configs", []):
            targets |= dict.fromkeys(dns["names"], dns["port"])
        for static in job.get("static_configs", []):
            targets |= {t.split(":")[0]: int(t.split(":")[1]) for t in static["targets"]}
    api_port = services["api"]["healthcheck"]["test"][-1].split("127.0.0.1:")[1].split("/")[0]
    (port,) = ports
    roles = {"scheduler": port, "worker": port, "projector": port}
    assert targets == roles | {"api": int(api_port)}


def compose_command() -> list[str]:
    """`docker compose`, or the standalone `docker-compose`; skips (fails where the
    services are required) when neither is installed."""
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run(  # noqa: S603 (a fixed argument list)
            [docker, "compose", "version"], capture_output=True, check=False, timeout=30
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    if standalone is not None:
        return [standalone]
    message = (
        "docker is not installed"
        if docker is None
        else "docker has no compose plugin, and docker-compose is not installed"
    )
    return missing_service(message)  # it never returns: it fails or skips


def test_docker_compose_validates_the_compose_file() -> None:
    """If `docker compose config` checks docker-compose.yml with the passwords set, then
    it finds no error; without the admin password it refuses, naming the variable."""
    command = [*compose_command(), "-f", "docker-compose.yml", "--profile", "app", "config", "-q"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
    clean.pop("POSTGRES_PASSWORD", None)
    secrets = {"JOBLEDGER_ADMIN_PASSWORD": ADMIN_PASSWORD, "POSTGRES_PASSWORD": "pg-secret-1"}

    def config(environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: S603 (a fixed argument list)
            command,
            cwd=ROOT,
            env=environ,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    valid = config(clean | secrets)
    assert valid.returncode == 0, valid.stderr
    refused = config(clean | {"POSTGRES_PASSWORD": "pg-secret-1"})
    assert refused.returncode != 0
    assert "JOBLEDGER_ADMIN_PASSWORD" in refused.stderr


# ---- the roles as processes --------------------------------------------------------


@pytest.fixture
def deployment(
    postgres_url: str, redis_server: str, tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> Iterator[Deployment]:
    """api, two schedulers, two workers and a projector, as the Procfile starts them."""
    shared = {
        "database_url": postgres_url,
        "redis_url": redis_server,
        "redis_prefix": f"d{uuid.uuid4().hex[:8]}",
        "data_dir": str(tmp_path / "data"),
        "projection_poll_ms": "100",
    }
    # The release step, as an operator runs it before starting the processes.
    release = jobledger_cli.run("migrate", env=jobledger_cli.environment(**shared))
    assert release.returncode == 0, release.stderr
    running = Deployment()
    try:
        launch(running, shared, tmp_path, jobledger_cli, "scheduler1", "scheduler2")
        yield running
    finally:
        for role in running.roles.values():
            role.stop()


def submit_work(client: httpx.Client) -> tuple[set[str], str]:
    """Three triggered manual jobs, four ad-hoc runs and a one-shot job due in two
    seconds: the ids of the seven executions, and the one-shot job's id."""
    expected: set[str] = set()
    for n in range(3):
        job = client.post("/api/v1/jobs", json={"name": f"manual {n}", "handler": "test.echo"})
        assert job.status_code == 201, job.text
        fired = client.post(f"/api/v1/jobs/{job.json()['id']}/trigger")
        assert fired.status_code == 202, fired.text
        expected.add(fired.json()["id"])
    for n in range(4):
        adhoc = client.post(
            "/api/v1/executions", json={"handler": "test.echo", "payload": {"n": n}}
        )
        assert adhoc.status_code == 202, adhoc.text
        expected.add(adhoc.json()["id"])
    # A one-shot job, so the leading scheduler has a fire of its own to make.
    run_at = (datetime.now(tz=UTC) + timedelta(seconds=2)).isoformat()
    once = client.post(
        "/api/v1/jobs",
        json={
            "name": "once",
            "handler": "test.echo",
            "schedule": {"kind": "once", "run_at": run_at},
        },
    )
    assert once.status_code == 201, once.text
    once_id: str = once.json()["id"]
    return expected, once_id


def check_each_ran_once(
    deployment: Deployment, client: httpx.Client, expected: set[str], once_id: str
) -> None:
    count = len(expected) + 1

    def completed() -> list[dict[str, Any]]:
        deployment.check_alive()
        page = client.get("/api/v1/executions", params={"status": "completed", "limit": 100})
        assert page.status_code == 200, page.text
        items: list[dict[str, Any]] = page.json()["items"]
        return items

    wait_for(lambda: len(completed()) >= count, f"{count} completed executions")
    time.sleep(1)  # a second run of any of them would have shown up by now
    rows = completed()
    assert len(rows) == count
    ids = {row["id"] for row in rows}
    assert expected <= ids
    assert [row["job_id"] for row in rows if row["id"] not in expected] == [once_id]
    assert all(row["attempt"] == 1 for row in rows)
    for execution_id in ids:
        events = client.get(f"/api/v1/executions/{execution_id}/events")
        assert events.status_code == 200, events.text
        types = [event["type"] for event in events.json()]
        assert types.count("ExecutionLeased") == 1, types
        assert types.count("ExecutionCompleted") == 1, types


def check_metrics(deployment: Deployment, count: int) -> None:
    """Each role's /metrics shows its part of ``count`` executions."""
    workers = deployment.of("worker")

    def worker_total(name: str, **labels: str) -> float:
        return sum(total(w.scrape(), name, **labels) for w in workers)

    wait_for(
        lambda: worker_total("jobledger_completions_total", outcome="completed") == count,
        "the workers' completions",
    )
    assert worker_total("jobledger_completions_total") == count
    assert worker_total("jobledger_leases_total") == count

    schedulers = deployment.of("scheduler")
    assert sorted(total(s.scrape(), "jobledger_leader") for s in schedulers) == [0, 1]
    assert sum(total(s.scrape(), "jobledger_fires_total") for s in schedulers) == 1

    api = deployment.roles["api"].scrape()
    assert total(api, "jobledger_http_requests_total", method="POST", status="201") == 4
    assert total(api, "jobledger_http_requests_total", method="POST", status="202") == 7

    projector = deployment.roles["projector"]

    def projected() -> bool:
        positions = [
            value
            for (name, _), value in projector.scrape().items()
            if name == "jobledger_projection_position"
        ]
        return len(positions) >= 3 and all(p > 0 for p in positions)

    wait_for(projected, "the projector's follower positions")


# The most the six processes below may hold after their work: about 25 measured (see
# the Connections section of docs/operations.md), against about 51 while each pool
# opened all its connections at start.
DEPLOYMENT_CONNECTIONS = 36
ROLES = ("api", "scheduler", "worker", "projector")


def check_connections(postgres_url: str) -> None:
    """Every connection to the database names its role and host, and the deployment
    holds no more than its budget."""
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1"
        ).fetchall()
    held = {str(name): int(count) for name, count in rows}
    host = socket.gethostname()
    assert set(held) <= {f"jobledger-{role}@{host}"[:63] for role in ROLES}, held
    assert sum(held.values()) <= DEPLOYMENT_CONNECTIONS, held


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.slow
def test_the_production_roles_run_every_execution_once_and_report_metrics(
    deployment: Deployment, postgres_url: str
) -> None:
    """If the api, two schedulers, two workers and a projector run as separate processes
    and jobs are triggered, scheduled once and run ad hoc over HTTP, then each execution
    completes exactly once, every role's /metrics shows its work, exactly one scheduler
    leads, every connection names its role within the role's budget, and SIGTERM stops
    every process with status 0."""
    wait_until_serving(deployment)
    with admin_client(deployment.api_url) as client:
        expected, once_id = submit_work(client)
        check_each_ran_once(deployment, client, expected, once_id)
    check_metrics(deployment, len(expected) + 1)
    check_connections(postgres_url)

    codes = {name: role.stop() for name, role in deployment.roles.items()}
    logs = {name: role.output() for name, role in deployment.roles.items()}
    assert codes == dict.fromkeys(deployment.roles, 0), logs
    for name, text in logs.items():
        assert "Traceback" not in text, f"{name}: {text}"
        # The default log format in production: a log collector must read every line.
        lines = [line for line in text.splitlines() if line.strip()]
        assert all(isinstance(json.loads(line), dict) for line in lines), f"{name}: {text}"


# ---- the Procfile under a Procfile runner ------------------------------------------


def procfile_ports() -> dict[str, int]:
    """The metrics port of each process type that sets one."""
    return {
        name: int(environ["JOBLEDGER_METRICS_PORT"])
        for name, (environ, _) in procfile().items()
        if "JOBLEDGER_METRICS_PORT" in environ
    }


def busy(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def scrape_ok(url: str) -> Samples | None:
    try:
        response = httpx.get(url, timeout=2)
    except httpx.HTTPError:
        return None
    return parse(response.text) if response.status_code == HTTPStatus.OK else None


@pytest.mark.slow
def test_honcho_runs_the_procfile_topology(
    postgres_url: str, redis_server: str, tmp_path: Path, jobledger_cli: "JobledgerCli"
) -> None:
    """If `honcho start` runs the Procfile on PostgreSQL and Redis, then the api, two
    schedulers (one leading), three workers and the projector all come up and serve
    their metrics on the Procfile's ports, and one Ctrl+C stops all seven with status 0."""
    ports = procfile_ports()
    taken = sorted(p for p in ports.values() if busy(p))
    assert not taken, f"the Procfile's metrics ports {taken} are in use on this machine"
    api_port = free_port()
    environ = jobledger_cli.environment(
        database_url=postgres_url,
        redis_url=redis_server,
        redis_prefix=f"h{uuid.uuid4().hex[:8]}",
        admin_password=ADMIN_PASSWORD,
        api_port=str(api_port),
    )
    environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environ.get('PATH', '')}"
    honcho = shutil.which("honcho", path=environ["PATH"])
    assert honcho is not None, "honcho is missing: make setup installs it with the dev extra"
    log_path = tmp_path / "honcho.log"
    with log_path.open("wb") as log:
        runner = subprocess.Popen(  # noqa: S603 (a fixed argument list)
            [honcho, "start", "-f", str(ROOT / "Procfile"), "-d", str(tmp_path)],
            env=environ,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            urls = {name: f"http://127.0.0.1:{port}/metrics" for name, port in ports.items()}
            urls["api"] = f"http://127.0.0.1:{api_port}/metrics"
            # Seven interpreters start at once on a machine the other tests also load.
            wait_for(
                lambda: all(scrape_ok(url) for url in urls.values()),
                "every role's metrics",
                timeout=90,
                detail=lambda: (
                    f"silent: {sorted(n for n, u in urls.items() if not scrape_ok(u))}\n"
                    f"{log_path.read_text()[-4000:]}"
                ),
            )
            schedulers = [urls["scheduler1"], urls["scheduler2"]]
            wait_for(
                lambda: sum(total(scrape_ok(u) or {}, "jobledger_leader") for u in schedulers) == 1,
                "one leading scheduler",
            )
            runner.send_signal(signal.SIGINT)
            runner.wait(60)
        finally:
            if runner.poll() is None:
                runner.kill()
                runner.wait()
    output = log_path.read_text()
    stopped = re.findall(r"\| (\w+)\.\d+ stopped \(rc=(-?\d+)\)", output)
    assert sorted(name for name, _ in stopped) == sorted([*ports, "api"]), output
    assert {code for _, code in stopped} == {"0"}, output
