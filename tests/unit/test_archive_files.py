"""Archive files: written durably, read back byte for byte, and refused when damaged."""

import gzip
import os
import stat
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobledger.persistence.archive_files import (
    ArchivedEvent,
    ArchiveFileError,
    Manifest,
    data_path,
    events_digest,
    make_private_folder,
    manifest_path,
    read_events,
    read_manifest,
    verified,
    write_data,
    write_manifest,
)

AT = datetime(2026, 12, 1, tzinfo=UTC)


def events() -> list[ArchivedEvent]:
    run = uuid.uuid4()
    return [
        ArchivedEvent(3, run, 1, "jobledger:ExecutionEnqueued", b'{"a":"\\u00e9 \xc3\xa9"}'),
        ArchivedEvent(7, run, 2, "jobledger:ExecutionCancelled", b"\x00\xff not utf-8"),
    ]


def written(folder: Path, stored: list[ArchivedEvent]) -> Manifest:
    sha256 = write_data(folder, "history-a", stored)
    manifest = Manifest(
        name="history-a",
        created_at=AT,
        cutoff=AT,
        first_position=stored[0].position,
        last_position=stored[-1].position,
        executions=1,
        events=len(stored),
        sha256=sha256,
        events_sha256=events_digest(stored),
        execution_ids=[stored[0].originator_id],
    )
    write_manifest(folder, manifest)
    return manifest


def test_an_archive_reads_back_byte_for_byte(tmp_path: Path) -> None:
    """If events are archived, then they read back equal, UTF-8 states and others
    alike, the manifest verifies, and no part file is left."""
    stored = events()
    manifest = written(tmp_path, stored)
    assert list(read_events(data_path(tmp_path, "history-a"))) == stored
    assert verified(tmp_path, "history-a") == manifest
    assert not list(tmp_path.glob("*.part"))


def test_the_same_events_give_the_same_file(tmp_path: Path) -> None:
    """If an archive is written again from the same events, then its bytes are the same
    (a redone run writes the same archive)."""
    stored = events()
    assert write_data(tmp_path, "history-a", stored) == write_data(tmp_path, "history-a", stored)


def test_a_damaged_archive_is_refused(tmp_path: Path) -> None:
    """If an archive's file was changed, then verifying it fails, naming the file."""
    stored = events()
    written(tmp_path, stored)
    path = data_path(tmp_path, "history-a")
    with gzip.open(path, "ab") as more:
        more.write(b"\n")
    with pytest.raises(ArchiveFileError, match=r"sha256 .* is not the manifest's"):
        verified(tmp_path, "history-a")
    path.write_bytes(b"not gzip")
    with pytest.raises(ArchiveFileError, match="history-a"):
        list(read_events(path))


_DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    "line",
    [b'{"x": ' + _DEEP + b"}", b'{"position": 1' + b"0" * 5000 + b"}", b"\xff\xfe"],
    ids=["nested-100000-deep", "huge-number", "invalid-utf8"],
)
def test_a_file_no_decoder_reads_is_refused_as_the_archives_error(
    tmp_path: Path, line: bytes
) -> None:
    """If an archive's manifest or one line of its data is nested past the decoder's
    depth, holds a huge number or is not UTF-8, then reading it raises the archive's
    error naming the file, which the reader reports as an unreadable archive."""
    written(tmp_path, events())
    path = data_path(tmp_path, "history-a")
    with gzip.open(path, "wb") as data:
        data.write(line + b"\n")
    with pytest.raises(ArchiveFileError, match="line 1"):
        list(read_events(path))
    manifest = manifest_path(tmp_path, "history-a")
    manifest.write_bytes(line)
    with pytest.raises(ArchiveFileError, match="not an archive manifest"):
        read_manifest(manifest)


@pytest.fixture(params=[0o000, 0o022], ids=["umask-000", "umask-022"])
def permissive_umask(request: pytest.FixtureRequest) -> Iterator[None]:
    """The process's umask set to a permissive one for the test, then put back."""
    previous = os.umask(request.param)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("permissive_umask")
def test_archive_files_and_folders_are_the_owners_alone(tmp_path: Path) -> None:
    """If archives are written under a permissive umask, into a folder that does not
    exist yet, then the folder and every parent made for it are 0700, both files 0600,
    and a ``.part`` a stopped run left readable to all is 0600 once written again."""
    folder = tmp_path / "new" / "archives"
    make_private_folder(folder)
    stale = folder / "history-a.jsonl.gz.part"
    stale.write_bytes(b"left by a stopped run")
    stale.chmod(0o666)
    written(folder, events())
    assert [mode(p) for p in (tmp_path / "new", folder)] == [0o700, 0o700]
    assert {p.name: mode(p) for p in folder.iterdir()} == {
        "history-a.jsonl.gz": 0o600,
        "history-a.manifest.json": 0o600,
    }
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    make_private_folder(shared)
    assert mode(shared) == 0o700
