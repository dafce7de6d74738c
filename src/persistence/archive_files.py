"""Archive files of stored events: gzip JSON lines and a manifest, checksummed (ADR 45).

An archive is two files in a folder: ``<name>.jsonl.gz`` holds one JSON object per
event in log order, and ``<name>.manifest.json`` says what it holds (range, counts,
execution ids) and how to check it (the sha256 of the compressed file, and the events
digest: a sha256 over every event's columns, which the log's own rows give too, so
the rows removed from the log can be compared with the archive they went to).

Both files are written to a ``.part`` file, flushed to the disk, then renamed into
place, and the folder flushed too: after a crash either a whole file is there, or none.
They hold every field of the runs archived, so files and folders are the owner's alone
(0600 and 0700), whatever the process's umask.
"""

import base64
import gzip
import hashlib
import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO
from uuid import UUID

import msgspec
import structlog

from jobledger.domain.json_values import UNREADABLE

log = structlog.get_logger(__name__)

FORMAT = "jobledger-archive/1"
DATA_SUFFIX = ".jsonl.gz"
MANIFEST_SUFFIX = ".manifest.json"
PART_SUFFIX = ".part"
_CHUNK = 1 << 20
FILE_MODE = 0o600
FOLDER_MODE = 0o700


class ArchiveFileError(Exception):
    """An archive file is missing, damaged, or not what its manifest says."""


class ArchivedEvent(msgspec.Struct, frozen=True):
    """One stored event as the log had it, with its position."""

    position: int
    originator_id: UUID
    originator_version: int
    topic: str
    state: bytes


class Manifest(msgspec.Struct, frozen=True, kw_only=True):
    """What one archive holds, and its checksums."""

    format: str = FORMAT
    name: str
    created_at: datetime
    cutoff: datetime
    first_position: int
    last_position: int
    executions: int
    events: int
    sha256: str  # of the compressed data file, as written
    events_sha256: str  # ``events_digest`` of its events
    execution_ids: list[UUID]


class _Line(msgspec.Struct, omit_defaults=True):
    position: int
    originator_id: UUID
    originator_version: int
    topic: str
    state: str | None = None  # the stored bytes, when they are UTF-8 (JSON states are)
    state_b64: str | None = None  # otherwise (a compressor or a cipher is configured)


_line_encoder = msgspec.json.Encoder()
_line_decoder = msgspec.json.Decoder(_Line)
_manifest_decoder = msgspec.json.Decoder(Manifest)


def events_digest(events: Iterable[ArchivedEvent]) -> str:
    """A sha256 over the events' columns, length-prefixed, in the order given."""
    digest = hashlib.sha256()
    for e in events:
        # No column but the state can hold a NUL: the head needs no lengths inside.
        head = f"{e.position}\0{e.originator_id}\0{e.originator_version}\0{e.topic}".encode()
        digest.update(b"".join((len(head).to_bytes(4), head, len(e.state).to_bytes(8), e.state)))
    return digest.hexdigest()


def data_path(folder: Path, name: str) -> Path:
    return folder / f"{name}{DATA_SUFFIX}"


def manifest_path(folder: Path, name: str) -> Path:
    return folder / f"{name}{MANIFEST_SUFFIX}"


def write_data(folder: Path, name: str, events: Iterable[ArchivedEvent]) -> str:
    """Write the data file durably; returns the sha256 of its bytes."""
    target = data_path(folder, name)
    part = target.with_name(target.name + PART_SUFFIX)
    with _private_file(part) as raw:
        # mtime 0: the same events give the same bytes, so a redone archive is the same.
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as packed:
            for event in events:
                packed.write(_line_encoder.encode(_line(event)) + b"\n")
        raw.flush()
        os.fsync(raw.fileno())
    _publish(part, target)
    return file_sha256(target)


def write_manifest(folder: Path, manifest: Manifest) -> str:
    """Write the manifest durably; returns the sha256 of its bytes."""
    data = msgspec.json.format(msgspec.json.encode(manifest))
    target = manifest_path(folder, manifest.name)
    part = target.with_name(target.name + PART_SUFFIX)
    with _private_file(part) as raw:
        raw.write(data)
        raw.flush()
        os.fsync(raw.fileno())
    _publish(part, target)
    return hashlib.sha256(data).hexdigest()


def make_private_folder(folder: Path) -> None:
    """Create ``folder`` and any missing parent as the owner's alone, and make an
    existing one so: ``mkdir``'s mode goes through the umask, ``chmod``'s does not."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    for path in reversed(missing):
        path.mkdir(mode=FOLDER_MODE, exist_ok=True)
        path.chmod(FOLDER_MODE)
    try:
        folder.chmod(FOLDER_MODE)
    except PermissionError:
        # Another user's folder (a shared mount) stays as its owner set it.
        log.warning("archive.folder_not_private", folder=str(folder))


def _private_file(path: Path) -> BinaryIO:
    """``path`` opened to be written anew, readable by its owner only (a ``.part`` left
    by a stopped run keeps whatever mode it had unless changed here)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(descriptor, FILE_MODE)
    except OSError:
        os.close(descriptor)
        raise
    return os.fdopen(descriptor, "wb")


def _publish(part: Path, target: Path) -> None:
    part.replace(target)
    folder = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _line(event: ArchivedEvent) -> _Line:
    try:
        text = event.state.decode()
    except UnicodeDecodeError:
        return _Line(*_columns(event), state_b64=base64.b64encode(event.state).decode())
    return _Line(*_columns(event), state=text)


def _columns(event: ArchivedEvent) -> tuple[int, UUID, int, str]:
    return (event.position, event.originator_id, event.originator_version, event.topic)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(path: Path) -> Manifest:
    try:
        return _manifest_decoder.decode(path.read_bytes())
    except OSError as error:
        raise ArchiveFileError(f"cannot read the manifest {path}: {error.strerror}") from None
    except UNREADABLE as error:
        raise ArchiveFileError(f"{path} is not an archive manifest: {error}") from None


def read_events(path: Path) -> Iterator[ArchivedEvent]:
    """The events of a data file, in its order (no check: see ``verified``)."""
    try:
        with gzip.open(path, "rb") as lines:
            for number, line in enumerate(lines, start=1):
                yield _event(path, number, line)
    except (OSError, EOFError) as error:
        raise ArchiveFileError(f"cannot read the archive {path}: {error}") from None


def _event(path: Path, number: int, line: bytes) -> ArchivedEvent:
    try:
        row = _line_decoder.decode(line)
        state = (
            row.state.encode() if row.state is not None else base64.b64decode(row.state_b64 or "")
        )
    except UNREADABLE as error:
        raise ArchiveFileError(f"{path}, line {number}: not an archived event: {error}") from None
    return ArchivedEvent(*_columns_of(row), state=state)


def _columns_of(row: _Line) -> tuple[int, UUID, int, str]:
    return (row.position, row.originator_id, row.originator_version, row.topic)


def verified(folder: Path, name: str) -> Manifest:
    """The manifest of archive ``name``, once both files were read back from the disk
    and agree with it: the file's sha256, the events digest and the counts."""
    manifest = read_manifest(manifest_path(folder, name))
    path = data_path(folder, name)
    try:
        actual = file_sha256(path)
    except OSError as error:
        raise ArchiveFileError(f"cannot read the archive {path}: {error.strerror}") from None
    _expect(path, "sha256", manifest.sha256, actual)
    events = list(read_events(path))
    _expect(path, "events digest", manifest.events_sha256, events_digest(events))
    _expect(path, "event count", manifest.events, len(events))
    executions = {e.originator_id for e in events}
    _expect(path, "execution count", manifest.executions, len(executions))
    if executions != set(manifest.execution_ids):
        raise ArchiveFileError(f"{path}: the executions are not those its manifest lists")
    return manifest


def _expect(path: Path, what: str, expected: Any, actual: Any) -> None:  # noqa: ANN401 (compared only)
    if expected != actual:
        raise ArchiveFileError(
            f"{path}: {what} {actual} is not the manifest's {expected}; the file is damaged "
            "or was changed"
        )


def archive_names(folder: Path) -> list[str]:
    """The archives in ``folder`` (by their manifests), oldest range first."""
    if not folder.is_dir():
        return []
    return sorted(p.name.removesuffix(MANIFEST_SUFFIX) for p in folder.glob("*" + MANIFEST_SUFFIX))


def unfinished_files(folder: Path) -> list[Path]:
    """Every archive file in ``folder``, finished or not, with its archive's name."""
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.iterdir()
        if p.name.startswith("history-") and (DATA_SUFFIX in p.name or MANIFEST_SUFFIX in p.name)
    )


def archive_of(path: Path) -> str:
    """The archive name a file of it (data, manifest, or a ``.part`` of either) is named by."""
    name = path.name.removesuffix(PART_SUFFIX)
    return name.removesuffix(DATA_SUFFIX).removesuffix(MANIFEST_SUFFIX)
