"""The Kubernetes manifests: rendered from their values as committed, valid against the
Kubernetes schemas, and wired as the roles need (probes, grace, secrets, settings)."""

import importlib.util
import types
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from jobledger.infra.settings import PREFIX, Settings

ROOT = Path(__file__).parents[2]
FOLDER = ROOT / "deploy" / "kubernetes"
# The oldest release the manifests aim at (policy/v1 and batch/v1 Job TTLs), and the
# newest the validator knows.
VERSIONS = ("1.27.0", kubernetes_validate.latest_version())
ROLES = ("api", "scheduler", "worker", "projector")


def _renderer() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("k8s_render", FOLDER / "render.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RENDER = _renderer()


def _docs(text: str | None = None) -> list[dict[str, Any]]:
    text = text if text is not None else (FOLDER / "jobledger.yaml").read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _by_name(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{doc['kind']}/{doc['metadata']['name']}": doc for doc in docs}


def test_the_committed_manifests_are_the_rendering_of_the_values() -> None:
    """If values.yaml changes, then jobledger.yaml is rendered again from it: the file
    committed is never a hand edit or stale."""
    assert (FOLDER / "jobledger.yaml").read_text() == RENDER.rendered()


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_against_the_kubernetes_schemas(version: str) -> None:
    """If a manifest has a field Kubernetes does not know, or misses one it needs, then
    the strict schema check of that release refuses it."""
    for doc in _docs():
        kubernetes_validate.validate(doc, version, strict=True)


def test_every_role_runs_with_its_probes_its_secrets_and_real_settings() -> None:
    """If the manifests are applied, then each role is a Deployment running its own
    command, probed on /health and /ready of the port it serves, with the database,
    Redis and admin password from the Secret (never a value), and every JOBLEDGER_
    variable is a setting jobledger reads."""
    found = _by_name(_docs())
    known = {PREFIX + name.upper() for name in Settings.__struct_fields__}
    for role in ROLES:
        pod = found[f"Deployment/jobledger-{role}"]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["args"] == [role]
        assert container["livenessProbe"]["httpGet"]["path"] == "/health"
        assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
        port = container["ports"][0]["name"]
        assert container["livenessProbe"]["httpGet"]["port"] == port
        secret = {e["name"] for e in container["env"] if "valueFrom" in e}
        assert {"JOBLEDGER_DATABASE_URL", "JOBLEDGER_REDIS_URL"} <= secret
        names = {e["name"] for e in container["env"]}
        assert names <= known, names - known
    assert set(found["ConfigMap/jobledger"]["data"]) <= known
    job = found["Job/jobledger-migrate"]["spec"]["template"]["spec"]
    assert job["containers"][0]["args"] == ["migrate"]
    budget = found["PodDisruptionBudget/jobledger-scheduler"]["spec"]
    assert budget["minAvailable"] == 1
    assert found["Deployment/jobledger-scheduler"]["spec"]["replicas"] >= 2


def test_a_workers_pod_may_take_longer_to_stop_than_its_handlers_grace() -> None:
    """If the values give workers a grace of 60 s and five replicas, then the workers
    run with that grace and their pods may take longer to stop, so running handlers
    finish or are handed back before the kubelet kills them."""
    values = yaml.safe_load((FOLDER / "values.yaml").read_text())
    values["worker"] |= {"graceSeconds": 60, "replicas": 5}
    worker = _by_name(RENDER.render(values))["Deployment/jobledger-worker"]["spec"]
    pod = worker["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["JOBLEDGER_WORKER_GRACE_SECONDS"] == "60"
    assert pod["terminationGracePeriodSeconds"] > 60
    assert worker["replicas"] == 5
