"""Loading handlers: built-ins, entry points and dotted paths, with one-line errors."""

import re
import sys
import uuid
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from jobledger.infra.errors import SettingsError
from jobledger.infra.settings import load_settings
from jobledger.runtime.handlers import registry
from jobledger.runtime.handlers.registry import ENTRY_POINT_GROUP, load_registry


def test_a_dotted_path_adds_a_handler() -> None:
    """If JOBLEDGER_HANDLERS names a function, then the registry has it beside the
    built-ins."""
    handlers = load_registry(("stamp=json:dumps",), test_handlers=True)
    assert {"stamp", "test.echo", "http.webhook"} <= set(handlers.names())


@pytest.mark.parametrize(
    ("environ", "loaded"),
    [
        ({}, False),
        ({"JOBLEDGER_MODE": "dev"}, True),
        ({"JOBLEDGER_TEST_HANDLERS": "true"}, True),
        ({"JOBLEDGER_MODE": "dev", "JOBLEDGER_TEST_HANDLERS": "false"}, False),
    ],
)
def test_the_test_handlers_are_off_in_production_unless_turned_on(
    environ: dict[str, str], loaded: bool
) -> None:
    """If the mode is production (the default) and JOBLEDGER_TEST_HANDLERS is not true,
    then no test.* handler (test.crash ends a worker) is loaded; dev mode loads them
    unless the setting says false; the real handlers are there either way."""
    settings = load_settings(environ)
    handlers = load_registry(test_handlers=settings.test_handlers_enabled)
    names = set(handlers.names())
    assert ({"test.crash", "test.echo", "test.fail"} <= names) is loaded
    assert any(name.startswith("test.") for name in names) is loaded
    assert {"http.webhook", "shell.command"} <= names


def test_a_disabled_test_handler_is_explained() -> None:
    """If a job names a test handler that is off, then the fix names the setting."""
    fix = registry.unknown_handler_fix("test.crash", ["http.webhook"])
    assert "JOBLEDGER_TEST_HANDLERS=true" in fix
    assert registry.unknown_handler_fix("acme.x", ["http.webhook"]) == "use one of: http.webhook"


@pytest.mark.parametrize(
    ("dotted", "message"),
    [
        ("report=acme_jobs.reports:send", "cannot load handler 'report'.*No module named"),
        ("stamp=json:no_such_function", "cannot load handler 'stamp'.*no attribute"),
        ("acme_jobs.reports", "cannot import module 'acme_jobs.reports'.*No module named"),
        ("stamp=json", "'stamp=json' is not name=package.module:function"),
        ("limit=sys:maxsize", "'sys:maxsize' is not a function"),
    ],
)
def test_a_bad_dotted_path_names_the_setting(dotted: str, message: str) -> None:
    """If JOBLEDGER_HANDLERS cannot be loaded, then the error names the variable and
    what is wrong with the entry."""
    with pytest.raises(SettingsError, match=f"JOBLEDGER_HANDLERS: .*{message}"):
        load_registry((dotted,))


def test_a_broken_entry_point_is_a_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """If an installed package declares a handler entry point that does not import,
    then loading fails with one message naming the handler, not an ImportError."""
    broken = EntryPoint("report", "acme_jobs.reports:send", ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda **_: [broken])
    with pytest.raises(SettingsError, match=re.escape("handler 'report' of the 'jobledger.")):
        load_registry()


@pytest.mark.parametrize(
    ("source", "named"),
    [
        ("async def send(ctx):\n    return (\n", "SyntaxError"),
        ("raise RuntimeError('boom at import')\n", "RuntimeError: boom at import"),
    ],
)
def test_a_module_that_fails_while_importing_is_a_settings_error(
    source: str, named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If a handler module has a syntax error or raises while it is imported, then
    loading fails with the one-line settings error naming what went wrong."""
    module = f"acme_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SettingsError, match=f"cannot load handler 'report'.*{named}"):
        load_registry((f"report={module}:send",))


def test_a_missing_handler_names_the_setting_only_for_a_test_handler() -> None:
    """If a worker has no handler for a run, then the error names the run's handler,
    and for a built-in test handler says the test handlers are off and names the
    setting; any other name gets no such advice."""
    error = registry.missing_handler_error("test.crash")
    assert error.startswith("no handler named 'test.crash': the test handlers are off")
    assert "JOBLEDGER_TEST_HANDLERS=true" in error
    assert registry.missing_handler_error("acme.x") == "no handler named 'acme.x'"
    assert registry.missing_handler_error("test.nope") == "no handler named 'test.nope'"


DECLARING = """
import msgspec
import jobledger

class Report(msgspec.Struct):
    month: str

@jobledger.handler("reports.send")
def send(payload: Report) -> None:
    \"\"\"Sends the month's report.\"\"\"

@jobledger.handler("reports.ping")
async def ping(ctx) -> dict:
    return {}
"""


def _module(source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"acme_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_module_adds_every_handler_it_declares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If JOBLEDGER_HANDLERS names a module, then every handler it declares is loaded
    under its declared name, with its description and its payload struct."""
    module = _module(DECLARING, tmp_path, monkeypatch)
    handlers = load_registry((module,))
    assert {"reports.send", "reports.ping", "http.webhook"} <= set(handlers.names())
    info = handlers.info("reports.send")
    assert info.description == "Sends the month's report."
    assert info.payload_type is not None
    assert info.payload_type.__name__ == "Report"
    assert handlers.info("reports.ping").payload_type is None
    assert handlers.info("http.webhook").description  # a built-in's doc line


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("x = 1\n", "declares no handler; decorate its functions"),
        (
            (
                "import jobledger\n"
                "@jobledger.handler('a.b')\ndef one(): pass\n"
                "@jobledger.handler('a.b')\ndef two(): pass\n"
            ),
            "two handlers are named 'a.b'",
        ),
        (
            (
                "import jobledger\n@jobledger.handler('a.b')\n"
                "@jobledger.periodic('* * * * *')\ndef one(): pass\n"
            ),
            "goes above @jobledger.handler",
        ),
    ],
)
def test_a_module_that_declares_nothing_usable_is_a_settings_error(
    source: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If a module named in JOBLEDGER_HANDLERS declares no handler, two of one name, or
    a schedule below its handler, then loading fails with a line saying how to fix it."""
    module = _module(source, tmp_path, monkeypatch)
    with pytest.raises(SettingsError, match=f"JOBLEDGER_HANDLERS: .*{message}"):
        load_registry((module,))


@pytest.mark.parametrize("form", ["module", "dotted"])
def test_a_handler_module_is_found_in_the_current_folder(
    form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If JOBLEDGER_HANDLERS names a package of the current folder, which is not on the
    path (a console script's path does not hold it), then it is imported from there,
    as uvicorn and celery find an app's module."""
    package = tmp_path / f"shop_{uuid.uuid4().hex[:8]}"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text(DECLARING)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in sys.path if p not in ("", str(tmp_path))])
    setting = f"{package.name}.jobs" if form == "module" else f"ping={package.name}.jobs:ping"
    handlers = load_registry((setting,))
    assert ("reports.ping" if form == "module" else "ping") in handlers.names()
