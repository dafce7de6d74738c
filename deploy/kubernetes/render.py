"""Render jobledger's Kubernetes manifests from one set of values.

    python deploy/kubernetes/render.py [--values values.yaml] > jobledger.yaml

Every role is a Deployment (the API behind a Service), the release step is a Job
(`jobledger migrate`), and the schedulers have a PodDisruptionBudget. Secrets come from
a Secret the operator creates; nothing secret is rendered. The API is probed on
`/health` and `/ready`; schedulers, workers and the projector on the same paths of their
metrics port. A worker's pod may take its worker grace and a margin to stop, so running
handlers finish or are handed back before the kubelet kills it.
"""

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent
LABEL = "app.kubernetes.io/name"
COMPONENT = "app.kubernetes.io/component"
# What a role needs beyond its command, by role.
ROLE_ENV: dict[str, dict[str, str]] = {
    "api": {"JOBLEDGER_API_HOST": "0.0.0.0"},  # noqa: S104 (inside the pod, behind the Service)
    "scheduler": {},
    "worker": {},
    "projector": {},
}
Doc = dict[str, Any]


def render(values: Doc) -> list[Doc]:
    """The manifests, in the order to apply them."""
    docs: list[Doc] = [_config(values), _migrate(values)]
    docs += [_deployment(values, role) for role in ROLE_ENV]
    docs += [_api_service(values), _scheduler_budget(values)]
    return docs


def _meta(values: Doc, name: str, component: str) -> Doc:
    return {
        "name": name,
        "namespace": values["namespace"],
        "labels": {LABEL: "jobledger", COMPONENT: component},
    }


def _config(values: Doc) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(values, "jobledger", "config"),
        "data": {str(k): str(v) for k, v in values["env"].items()},
    }


def _env(values: Doc) -> list[Doc]:
    secret = values["secretName"]
    keys = {
        "JOBLEDGER_DATABASE_URL": "database-url",
        "JOBLEDGER_REDIS_URL": "redis-url",
        "JOBLEDGER_ADMIN_PASSWORD": "admin-password",
        **values.get("extraSecretEnv", {}),
    }
    return [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        for name, key in keys.items()
    ]


def _container(values: Doc, role: str, args: list[str], extra: dict[str, str]) -> Doc:
    env = [{"name": k, "value": v} for k, v in extra.items()]
    return {
        "name": role,
        "image": values["image"],
        "imagePullPolicy": values["imagePullPolicy"],
        "args": args,
        "envFrom": [{"configMapRef": {"name": "jobledger"}}],
        "env": _env(values) + env,
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def _migrate(values: Doc) -> Doc:
    container = _container(values, "migrate", ["migrate"], {})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(values, "jobledger-migrate", "migrate"),
        "spec": {
            # The roles refuse a store that misses a migration: run this first, once per
            # release (it is safe to run again, and concurrently).
            "backoffLimit": 6,
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "metadata": {"labels": {LABEL: "jobledger", COMPONENT: "migrate"}},
                "spec": {"restartPolicy": "OnFailure", "containers": [container]},
            },
        },
    }


def _probes(port: int | str) -> Doc:
    return {
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": port},
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": port},
            "periodSeconds": 5,
            "failureThreshold": 2,
        },
    }


def _deployment(values: Doc, role: str) -> Doc:
    settings = values[role]
    extra = dict(ROLE_ENV[role])
    if role == "api":
        port, name = settings["port"], "http"
        extra["JOBLEDGER_API_PORT"] = str(port)
    else:
        port, name = values["metricsPort"], "metrics"
        extra |= {"JOBLEDGER_METRICS_HOST": "0.0.0.0", "JOBLEDGER_METRICS_PORT": str(port)}  # noqa: S104 (inside the pod)
    if role == "worker":
        extra |= {
            "JOBLEDGER_WORKER_QUEUES": str(settings["queues"]),
            "JOBLEDGER_WORKER_SLOTS": str(settings["slots"]),
            "JOBLEDGER_WORKER_GRACE_SECONDS": str(settings["graceSeconds"]),
        }
    container = _container(values, role, [role], extra)
    container["ports"] = [{"name": name, "containerPort": port}]
    container["resources"] = settings["resources"]
    container |= _probes(name)
    pod: Doc = {"containers": [container]}
    if role == "worker":
        pod["terminationGracePeriodSeconds"] = settings["graceSeconds"] + settings["graceMargin"]
    selector = {LABEL: "jobledger", COMPONENT: role}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(values, f"jobledger-{role}", role),
        "spec": {
            "replicas": settings["replicas"],
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {
                    "labels": selector,
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(port),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": pod,
            },
        },
    }


def _api_service(values: Doc) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(values, "jobledger-api", "api"),
        "spec": {
            "selector": {LABEL: "jobledger", COMPONENT: "api"},
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
        },
    }


def _scheduler_budget(values: Doc) -> Doc:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(values, "jobledger-scheduler", "scheduler"),
        "spec": {
            # A drain never takes both: the standby takes over within the leader lock's
            # time to live instead of nobody firing until a pod is rescheduled.
            "minAvailable": 1,
            "selector": {"matchLabels": {LABEL: "jobledger", COMPONENT: "scheduler"}},
        },
    }


def rendered(values_path: Path = HERE / "values.yaml") -> str:
    """The manifests of ``values_path`` as one YAML stream."""
    values = yaml.safe_load(values_path.read_text())
    header = f"# Rendered by deploy/kubernetes/render.py from {values_path.name}: edit that.\n"
    return header + yaml.safe_dump_all(render(values), sort_keys=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--values", type=Path, default=HERE / "values.yaml")
    args = parser.parse_args(argv)
    sys.stdout.write(rendered(args.values))
    return 0


if __name__ == "__main__":
    sys.exit(main())
