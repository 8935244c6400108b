"""Reading and writing a host's config file without losing it.

- A file named through a symlink is the link's target: that is what is read and written, and the link stays.
- What cannot be read whole and safely (not a regular file, unreadable, over `MAX_BYTES`, not UTF-8, not JSON or not
  an object where the host wants one) is refused with one line naming the file, before anything is written.
- A file without its owner's write permission is the user's decision: it is refused, not replaced.
- The new text goes to a temporary file in the same directory, with the old file's permissions (a new file: only its
  owner may read it, as it may hold an API key); the old bytes are copied beside it (`<name>.meta-agent.bak`); and
  the temporary file is renamed over the old one, so a reader sees the old file or the new one, never half of one.
- Just before that rename the file is read again: if the host (or anyone) changed it since it was read, the change is
  theirs and nothing is written.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from meta_agent.errors import ConfigError
from meta_agent.hosts.jsonc import Document, JsonTextError, parse

# A host's file is a few kilobytes, Claude Code's a few megabytes; past this it is not one meta-agent should rewrite.
MAX_BYTES = 32 * 1024 * 1024
BACKUP_SUFFIX = ".meta-agent.bak"
_BOM = "\ufeff"


@dataclass(frozen=True, kw_only=True)
class HostFile:
    """A host's config file as read: `named` as the user or the host names it, `path` the file itself (the target
    of a symlink), its bytes (None: there is no file yet) and, if it has content, its parsed document."""

    named: Path
    path: Path
    raw: bytes | None
    bom: str
    document: Document | None


def read(named: Path, *, comments: bool) -> HostFile:
    """Read the host's file `named` (missing is fine: there is none yet).

    Raises:
        ConfigError: the file cannot be read whole, is not JSON (with comments if `comments`), or may not be written.
    """
    path = Path(os.path.realpath(named))
    try:
        info = path.stat()
    except FileNotFoundError:
        return HostFile(named=named, path=path, raw=None, bom="", document=None)
    except OSError as exc:
        raise ConfigError(f"{named}: cannot read it: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{named}: not a regular file")
    if not info.st_mode & stat.S_IWUSR:
        raise ConfigError(f"{named}: the file is read-only; nothing was written (make it writable to change it)")
    if info.st_size > MAX_BYTES:
        raise ConfigError(f"{named}: larger than {MAX_BYTES // 1024 // 1024} MiB; not a file meta-agent rewrites")
    raw = _read_bytes(named, path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{named}: not UTF-8 text (byte {exc.start})") from None
    bom = _BOM if text.startswith(_BOM) else ""
    text = text.removeprefix(_BOM)
    if not text.strip():
        return HostFile(named=named, path=path, raw=raw, bom=bom, document=None)
    try:
        document = parse(text, comments=comments)
    except JsonTextError as exc:
        kind = "JSON with comments" if comments else "JSON"
        raise ConfigError(f"{named}: not valid {kind}: {exc}; nothing was written") from None
    return HostFile(named=named, path=path, raw=raw, bom=bom, document=document)


def _read_bytes(named: Path, path: Path) -> bytes:
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{named}: cannot read it: {exc.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"{named}: larger than {MAX_BYTES // 1024 // 1024} MiB; not a file meta-agent rewrites")
    return raw


def write(host_file: HostFile, text: str) -> Path | None:
    """Replace the file with `text`, keeping a copy of the old bytes beside it; returns where that copy is (None for
    a new file).

    Raises:
        ConfigError: the directory cannot be written, or the file changed since it was read (nothing is written).
    """
    path, named = host_file.path, host_file.named
    data = (host_file.bom + text).encode("utf-8")
    try:
        mode = _mode_of(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = _staged(path, data, mode)
    except OSError as exc:
        raise ConfigError(f"{named}: cannot write in {path.parent}: {exc.strerror}") from None
    try:
        if _current(path) != host_file.raw:
            raise ConfigError(f"{named}: changed while meta-agent was writing it (by the host?); nothing was written")
        backup = None
        if host_file.raw is not None:
            backup = path.with_name(path.name + BACKUP_SUFFIX)
            os.replace(_staged(backup, host_file.raw, mode), backup)
        os.replace(staged, path)
    except OSError as exc:
        raise ConfigError(f"{named}: cannot write it: {exc.strerror}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()
    _sync_directory(path.parent)
    return backup


def _mode_of(path: Path) -> int:
    """The permissions the new file gets: the old file's, or, for a new one (or one gone meanwhile, which the check
    before the rename refuses), only its owner's."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o600


def _staged(path: Path, data: bytes, mode: int) -> Path:
    """`data` in a new temporary file beside `path`, on disk, with `mode`."""
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(name, mode)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def _current(path: Path) -> bytes | None:
    """The file's bytes now (None: it is gone), as far as needed to tell whether they changed."""
    try:
        with path.open("rb") as file:
            return file.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None


def _sync_directory(directory: Path) -> None:
    """Make the rename durable (POSIX; Windows has no directory handle to sync)."""
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        handle = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)
