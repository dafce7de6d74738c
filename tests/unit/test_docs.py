"""The docs match the code: the README's configuration table, and doc blocks that run."""

import contextlib
import io
import re
from pathlib import Path

import pytest

from jobledger.infra.errors import SettingsError
from jobledger.infra.settings import PREFIX, Settings, load_settings

README = Path(__file__).resolve().parents[2] / "README.md"
ROW = re.compile(r"^\| `(JOBLEDGER_[A-Z0-9_]+)` \|", re.MULTILINE)


def test_every_setting_has_a_row_in_the_configuration_table() -> None:
    """If the README's configuration table is read, then it has one row per setting and
    no row for a variable the code does not read."""
    section = README.read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    documented = ROW.findall(section)
    assert len(documented) == len(set(documented))
    assert set(documented) == {PREFIX + name.upper() for name in Settings.__struct_fields__}


# A row whose meaning states a range: "| `JOBLEDGER_X` | default | ... 1 to 10 ... |".
RANGE_ROW = re.compile(
    r"^\| `JOBLEDGER_([A-Z0-9_]+)` \| [^|]* \| [^|]*?\b(\d+) to (\d+)\b", re.MULTILINE
)


def test_a_range_in_the_configuration_table_is_the_one_declared() -> None:
    """If the README's table gives a setting's range ("1024 to 104857600"), then the
    settings refuse a value just outside either end with that range in the message."""
    section = README.read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    ranges = RANGE_ROW.findall(section)
    assert ranges
    for name, low, high in ranges:
        variable = PREFIX + name
        for outside in (int(low) - 1, int(high) + 1):
            with pytest.raises(SettingsError, match=f"^{variable}: use {low} to {high}\\b"):
                load_settings({variable: str(outside)})


def test_the_handler_decisions_example_runs_and_prints_what_it_says() -> None:
    """If the Python block of handlers.md's "What a handler decides" is run as written,
    then it prints the lines its closing comments show: each decision as the handler
    raises it."""
    text = (README.parent / "docs" / "handlers.md").read_text()
    section = text.split("## What a handler decides", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    expected = [line[2:] for line in block.splitlines() if line.startswith("# ")]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block, "handlers.md", "exec"), {"__name__": "handlers_md"})  # noqa: S102 (the doc's own block)
    assert printed.getvalue().splitlines() == expected
