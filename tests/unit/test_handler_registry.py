"""Loading handlers: built-ins, entry points and dotted paths, with one-line errors."""

import re
import uuid
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from jobledger.runtime.errors import SettingsError
from jobledger.runtime.handlers import registry
from jobledger.runtime.handlers.registry import ENTRY_POINT_GROUP, load_registry


def test_a_dotted_path_adds_a_handler() -> None:
    """If JOBLEDGER_HANDLERS names a function, then the registry has it beside the
    built-ins."""
    handlers = load_registry("stamp=json:dumps")
    assert {"stamp", "test.echo", "http.webhook"} <= set(handlers.names())


@pytest.mark.parametrize(
    ("dotted", "message"),
    [
        ("report=acme_jobs.reports:send", "cannot load handler 'report'.*No module named"),
        ("stamp=json:no_such_function", "cannot load handler 'stamp'.*no attribute"),
        ("acme_jobs.reports", "'acme_jobs.reports' is not name=package.module:function"),
        ("stamp=json", "'stamp=json' is not name=package.module:function"),
        ("limit=sys:maxsize", "'sys:maxsize' is not a function"),
    ],
)
def test_a_bad_dotted_path_names_the_setting(dotted: str, message: str) -> None:
    """If JOBLEDGER_HANDLERS cannot be loaded, then the error names the variable and
    what is wrong with the entry."""
    with pytest.raises(SettingsError, match=f"JOBLEDGER_HANDLERS: .*{message}"):
        load_registry(dotted)


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
        load_registry(f"report={module}:send")
