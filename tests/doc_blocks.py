"""The fenced blocks of a Markdown document, as a reader meets them, and a runner that
does what they say: the docs tests run the tutorial's text itself, not a copy of it.

A block's info string says what it is:

- ``sh``: commands for the first terminal, in one shell that lives on (an ``export``
  or ``cd`` holds for the blocks after it); ``sh terminal=N``: the commands of
  another terminal, a program that runs until stopped;
- ``python`` or ``toml`` whose first line is a comment naming a file (``# app.py``): that
  file, as it is in the folder, or written there if it is not;
- no language: what the block before it prints. Each line's text must appear in that
  output, ``...`` standing for whatever differs from run to run (ids, times).
"""

import contextlib
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
TERMINAL = re.compile(r"\bterminal=(\d+)\b")
FILE_LINE = re.compile(r"^# ([\w./-]+)")
DONE = "__block_done__"


@dataclass(frozen=True)
class Block:
    language: str  # sh, python, toml, ... ("" for what a command prints)
    terminal: int  # the terminal an sh block runs in (1: the reader's own)
    text: str
    line: int  # where the block starts in the document, for messages

    @property
    def file(self) -> str | None:
        """The file a code block shows, named by its first line."""
        found = FILE_LINE.match(self.text)
        return found.group(1) if found and self.language in {"python", "toml"} else None


def blocks(markdown: str) -> list[Block]:
    found = []
    for match in FENCE.finditer(markdown):
        info = match.group(1).strip()
        terminal = TERMINAL.search(info)
        found.append(
            Block(
                language=info.split(" ", 1)[0] if info else "",
                terminal=int(terminal.group(1)) if terminal else 1,
                text=match.group(2),
                line=markdown.count("\n", 0, match.start()) + 1,
            )
        )
    return found


def check_output(expected: Block, output: str, after: Block) -> None:
    """Each line of ``expected`` appears in ``output``, ``...`` matching anything."""
    for line in expected.text.splitlines():
        pattern = ".*?".join(re.escape(part) for part in line.strip().split("..."))
        if pattern and not re.search(pattern, output):
            pytest.fail(
                f"the block at line {after.line} did not print {line.strip()!r} "
                f"(line {expected.line}):\n{output[-3000:]}"
            )


class Shell:
    """One terminal: a bash that reads the blocks from a pipe, so what one block sets
    holds for the next, and that stops at the first command that fails (``-e``)."""

    def __init__(self, folder: Path, environ: Mapping[str, str]) -> None:
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-e"],  # noqa: S607 (the reader's shell)
            cwd=folder,
            env=dict(environ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, block: Block, timeout: float) -> str:
        """The block's output; fails if a command of it fails or it takes too long."""
        assert self.process.stdin is not None
        # On a line of its own: the block's last output may not end its line.
        self.process.stdin.write(f"{block.text}\nprintf '\\n%s\\n' {DONE}\n")
        self.process.stdin.flush()
        output: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                pytest.fail(
                    f"the block at line {block.line} ran past {timeout} s:\n{''.join(output)}"
                )
            if line is None:
                code = self.process.wait()
                pytest.fail(
                    f"the block at line {block.line} failed (exit {code}):\n{''.join(output)}"
                )
            if line.strip() == DONE:
                return "".join(output)
            output.append(line)

    def stop(self) -> None:
        _stop_group(self.process)
        self.reader.join(5)  # the shell is gone: its output ends
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


class Program:
    """Another terminal: a block that runs until stopped, its output in a file."""

    def __init__(self, block: Block, folder: Path, environ: Mapping[str, str]) -> None:
        self.block = block
        self.log = folder / f".terminal-{block.terminal}.log"
        with self.log.open("w") as sink:
            self.process = subprocess.Popen(  # noqa: S603 (the document's own commands)
                ["bash", "--noprofile", "--norc", "-e", "-c", block.text],  # noqa: S607 (as above)
                cwd=folder,
                env=dict(environ),
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_for(self, expected: Block, timeout: float) -> None:
        """Until the program has printed the first line ``expected`` shows."""
        first = expected.text.splitlines()[0].strip()
        pattern = ".*?".join(re.escape(part) for part in first.split("..."))
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.log.read_text()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"terminal {self.block.terminal} (line {self.block.line}) did not print "
                    f"{first!r}:\n{self.log.read_text()[-3000:]}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        _stop_group(self.process, signal.SIGINT)  # Ctrl+C, as the text says


def _stop_group(
    process: subprocess.Popen[str] | subprocess.Popen[bytes], sig: int = signal.SIGTERM
) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


@contextlib.contextmanager
def terminals(folder: Path, environ: Mapping[str, str]) -> Iterator["Reader"]:
    reader = Reader(folder, environ)
    try:
        yield reader
    finally:
        reader.close()


class Reader:
    """Does what a document's blocks say, in order, as a reader at a terminal would."""

    def __init__(self, folder: Path, environ: Mapping[str, str]) -> None:
        self.folder = folder
        self.environ = environ
        self.shell = Shell(folder, environ)
        self.programs: list[Program] = []
        # (the block's line, its first line, seconds it took): what a reader waits for
        self.timings: list[tuple[int, str, float]] = []

    def follow(self, document: list[Block], *, timeout: float) -> None:
        for index, block in enumerate(document):
            started = time.monotonic()
            self._do(document, index, timeout)
            if block.language == "sh":
                first = block.text.splitlines()[0] if block.text else ""
                self.timings.append((block.line, first, time.monotonic() - started))

    def _do(self, document: list[Block], index: int, timeout: float) -> None:
        block = document[index]
        after = document[index + 1] if index + 1 < len(document) else None
        printed = after if after is not None and after.language == "" else None
        if block.language == "sh" and block.terminal == 1:
            output = self.shell.run(block, timeout)
            if printed is not None:
                check_output(printed, output, block)
        elif block.language == "sh":
            program = Program(block, self.folder, self.environ)
            self.programs.append(program)
            if printed is None:
                pytest.fail(f"the block at line {block.line} shows no output to wait for")
            program.wait_for(printed, timeout)
        elif block.file is not None:
            self._file(block)

    def _file(self, block: Block) -> None:
        """A file the text shows: the folder's own must be the same; a new one is written."""
        assert block.file is not None
        path = self.folder / block.file
        if path.exists():
            assert path.read_text() == block.text, f"{block.file} differs from line {block.line}"
        else:
            path.write_text(block.text)

    def close(self) -> None:
        for program in reversed(self.programs):
            program.stop()
        self.shell.stop()
