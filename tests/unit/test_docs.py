"""The README's configuration table matches the settings the code reads."""

import re
from pathlib import Path

from jobledger.runtime.settings import PREFIX, Settings

README = Path(__file__).resolve().parents[2] / "README.md"
ROW = re.compile(r"^\| `(JOBLEDGER_[A-Z0-9_]+)` \|", re.MULTILINE)


def test_every_setting_has_a_row_in_the_configuration_table() -> None:
    """If the README's configuration table is read, then it has one row per setting and
    no row for a variable the code does not read."""
    section = README.read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    documented = ROW.findall(section)
    assert len(documented) == len(set(documented))
    assert set(documented) == {PREFIX + name.upper() for name in Settings.__struct_fields__}
