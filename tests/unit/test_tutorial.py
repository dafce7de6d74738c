"""The tutorial shows the example's files as they are (the example itself runs end to
end in tests/integration/test_example_shop.py)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
# A fenced block whose first line names the file it shows: "# examples/shop/jobs.py".
BLOCK = re.compile(
    r"^```(?:python|toml)\n(# (examples/[\w/.]+)[^\n]*\n.*?)^```$", re.MULTILINE | re.DOTALL
)


def test_every_file_the_tutorial_shows_is_the_examples_own() -> None:
    """If the tutorial shows a file of examples/, then it shows it whole and as it is,
    and it shows each of the shop's files."""
    shown = {path: text for text, path in BLOCK.findall(TUTORIAL.read_text())}
    assert set(shown) == {
        "examples/shop/jobs.py",
        "examples/shop/jobs.toml",
        "examples/shop/app.py",
    }
    for path, text in shown.items():
        assert text == (ROOT / path).read_text(), path
