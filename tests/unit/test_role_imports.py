"""What a role's process loads before it does anything: every process of the roles
pays for each module in its resident memory, idle or not."""

import json
import subprocess
import sys

# Loaded only by what needs them: the web stack by the commands that serve it (about
# 10 MiB), the holiday tables by the first schedule that names a calendar (11 MiB).
NOT_AT_START = ("litestar", "uvicorn", "holidays", "jobledger.api")


def test_the_command_line_loads_neither_the_web_stack_nor_the_holiday_tables() -> None:
    """If the command line that starts every role is imported, then no web framework,
    API module or holiday table is loaded; a calendar check then loads the tables."""
    probe = (
        "import json, sys, jobledger.cli; before = sorted(sys.modules); "
        "from jobledger.domain.calendars import check_calendar; check_calendar('DE-BY'); "
        "print(json.dumps([before, 'holidays' in sys.modules]))"
    )
    output = subprocess.run(  # noqa: S603 (this interpreter, a fixed script)
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    loaded, tables_after_check = json.loads(output)
    assert "jobledger.runtime.worker" in loaded
    assert [
        m for m in loaded if m.split(".")[0] in NOT_AT_START or m.startswith(NOT_AT_START)
    ] == []
    assert tables_after_check
