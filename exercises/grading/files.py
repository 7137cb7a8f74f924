"""Files: reading submitted material without following links, and without ever echoing it.

Everything the grader reads that a student could have placed or changed goes through here: the
submissions folder (:class:`SubmittedFolder`) and what a job wrote in its folder while it ran
(:func:`read_file`, :func:`read_tail`, :func:`copy_regular_files`). The rules:

- Only regular files are read. A symbolic link (at any depth, whatever it points to), a FIFO, a
  socket or a device is refused: every folder on the way is opened relative to the one above it
  with ``O_NOFOLLOW | O_DIRECTORY``, the file itself with ``O_NOFOLLOW | O_NONBLOCK`` (so that a
  FIFO swapped in cannot block), and the opened descriptor is checked with ``fstat``. What was
  seen when the folder was listed is never trusted: an entry swapped for a link afterwards is
  refused when it is read.
- A regular file with more names than the folder holds (``st_nlink``) is a hard link to a file
  elsewhere and is refused. Hard links whose every name is inside the folder (an archive that
  stored the same file twice) are read.
- Reads are limited in size; a larger file is refused, not read.
- A refusal (:class:`Refused`) says what the entry is and why it was not read, in the grader's
  own words: no byte of any file is ever part of a message.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

NOT_REGULAR = "not a regular file"  # the status of every entry that is not read
MAX_DEPTH = 32  # folders nested deeper than this are not searched

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFDIR: "a folder",
}
_WHY = {
    "a symbolic link": "a symbolic link is never followed: what it points to was not submitted",
    "a FIFO": "a named pipe (FIFO) is not a file",
    "a socket": "a socket is not a file",
    "a device": "a device file is not a file",
    "a folder": "a folder where a file was expected",
}


class Refused(Exception):
    """An entry that is not read: its ``status`` (as the table writes it) and a ``detail``."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status, self.detail = status, detail


def not_regular(kind: str, detail: str = "") -> Refused:
    """The refusal of an entry that is not a regular file (``kind``: "a symbolic link", "a FIFO", ...)."""
    why = _WHY.get(kind, "not a regular file")
    return Refused(f"{NOT_REGULAR}: {kind}", detail or f"{why}; nothing was read")


def kind_of(mode: int) -> str:
    """What a file mode is, in words ("a symbolic link", "a FIFO", ...; "a file" for a regular file)."""
    if stat.S_ISREG(mode):
        return "a file"
    return _KINDS.get(stat.S_IFMT(mode), "an entry of another kind")


def _open_dir(name: str, dir_fd: int | None, where: str) -> int:
    """Open the folder ``name`` (relative to ``dir_fd``) without following a link; Refused if it is one."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise Refused("not a notebook", f"the file cannot be read: {e.strerror or type(e).__name__}") from None
    try:  # O_NOFOLLOW | O_DIRECTORY met something else than a folder: say what (a look, not a read)
        kind = kind_of(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        kind = "gone"
    if kind == "a symbolic link":
        raise not_regular(kind, f"{where} on its path is a symbolic link, never followed; nothing was read")
    raise Refused("not a notebook", f"{where} on its path is no longer a folder; nothing was read")


def open_regular(dir_fd: int, parts: tuple[str, ...],
                 names_of: dict[tuple[int, int], int] | None = None) -> tuple[int, os.stat_result]:
    """Open ``dir_fd/parts...`` for reading if, and only if, it is a regular file; its descriptor and fstat.

    No symbolic link is followed at any depth. ``names_of``: how many names the caller found
    inside its folder for each file, by ``(st_dev, st_ino)``; a file opened with more names
    (``st_nlink``) than that, or than one when ``names_of`` is not given, is a hard link to a file
    elsewhere and is refused. Raises :class:`Refused`; the caller closes the descriptor.
    """
    if not parts or any(p in ("", ".", "..") or "/" in p for p in parts):
        raise ValueError(f"parts must be names inside the folder, got {parts!r}")
    fds = []
    try:
        parent = dir_fd
        for i, part in enumerate(parts[:-1]):
            parent = _open_dir(part, parent, repr("/".join(parts[:i + 1])))
            fds.append(parent)
        try:
            # a first look, so that a FIFO or a device listed as such is not even opened
            before = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except OSError as e:
            raise Refused("not a notebook", f"the file cannot be read: {e.strerror or type(e).__name__}") from None
        if not stat.S_ISREG(before.st_mode):
            raise not_regular(kind_of(before.st_mode))
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
        except OSError as e:
            if e.errno == errno.ELOOP:  # swapped for a link since the first look
                raise not_regular("a symbolic link") from None
            raise Refused("not a notebook", f"the file cannot be read: {e.strerror or type(e).__name__}") from None
    finally:
        for f in fds:
            os.close(f)
    st = os.fstat(fd)  # what was opened, whatever the path showed a moment before
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise not_regular(kind_of(st.st_mode))
    inside = max(1, (names_of or {}).get((st.st_dev, st.st_ino), 0))
    if st.st_nlink > inside:
        os.close(fd)
        raise not_regular("a hard link", f"a hard link: the file has {st.st_nlink} names and only {inside} "
                                          "of them in the folder, so it may be a file that was not "
                                          "submitted; nothing was read")
    return fd, st


def _too_large(size: int, limit: int) -> Refused:
    return Refused("not a notebook", f"the file is {size / 1e6:.1f} MB, more than the {limit / 1e6:g} MB "
                                     "a submission may have; it was not read")


def read_fd(fd: int, size: int, limit: int) -> bytes:
    """Read at most ``limit`` bytes from ``fd``; Refused (too large) if there are more."""
    if size > limit:
        raise _too_large(size, limit)
    chunks, total = [], 0
    while total <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > limit:  # it grew after fstat
        raise _too_large(total, limit)
    return b"".join(chunks)


def read_file(folder: Path | int, parts: tuple[str, ...] | str, limit: int,
              names_of: dict[tuple[int, int], int] | None = None) -> bytes:
    """The bytes of the regular file ``folder/parts``, at most ``limit``, or :class:`Refused`.

    ``folder`` is a path (opened here, following the links of the path itself: it is the
    grader's or the instructor's) or an open folder descriptor; ``parts`` is the relative path,
    no part of which is followed if it is a link.
    """
    parts = tuple(Path(parts).parts) if isinstance(parts, str) else parts
    dir_fd = folder if isinstance(folder, int) else os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd, st = open_regular(dir_fd, parts, names_of)
        try:
            return read_fd(fd, st.st_size, limit)
        finally:
            os.close(fd)
    finally:
        if not isinstance(folder, int):
            os.close(dir_fd)


def read_tail(folder: Path, parts: tuple[str, ...], n: int) -> bytes:
    """The last ``n`` bytes of the regular file ``folder/parts`` (b"" if it is not one, or unreadable)."""
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        fd, st = open_regular(dir_fd, parts)
    except Refused:
        return b""
    finally:
        os.close(dir_fd)
    data = b""
    try:
        os.lseek(fd, max(0, st.st_size - n), os.SEEK_SET)
        while len(data) < n:
            chunk = os.read(fd, n - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        return b""
    finally:
        os.close(fd)
    return data


def copy_regular_files(src: Path, dst: Path, max_file: int, max_files: int = 10_000,
                       max_total: int = 256_000_000) -> int:
    """Copy the regular files directly in ``src`` (no link followed, no subfolder) into ``dst``.

    Used on what a job wrote, so that the grader only ever reads its own copy. Entries that are
    not regular files, files larger than ``max_file``, and whatever comes after ``max_files``
    files or ``max_total`` bytes are left out. Returns how many entries were left out.
    """
    try:
        src_fd = os.open(src, _DIR_FLAGS)
    except OSError:
        return 0
    left_out, copied, total = 0, 0, 0
    try:
        with os.scandir(src_fd) as entries:
            names = sorted(e.name for e in entries)
        for name in names:
            if copied >= max_files or total >= max_total:
                left_out += 1
                continue
            try:
                data = read_file(src_fd, (name,), min(max_file, max_total - total))
            except Refused:
                left_out += 1
                continue
            except OSError:
                left_out += 1
                continue
            fd = os.open(dst / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            copied, total = copied + 1, total + len(data)
    finally:
        os.close(src_fd)
    return left_out


class SubmittedFolder:
    """The submissions folder, opened once: every entry listed and read without following a link.

    :meth:`entries` lists every entry that is not a folder (hidden ones and ``__pycache__``
    skipped), each with its relative path and kind; :meth:`read` reads one of them by its
    relative path, from the folder's own descriptor, under the rules of this module. The folder
    itself is the instructor's: a link in its own path is followed.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.names_of: dict[tuple[int, int], int] = {}  # (st_dev, st_ino) of a file -> its names listed

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> SubmittedFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def entries(self, skip: set[tuple[int, int]] = frozenset()) -> list[tuple[str, str]]:
        """``(relative path, kind)`` of every entry but folders, sorted; ``skip``: (st_dev, st_ino) left out.

        A kind is ``"a file"`` (a regular file), or what the entry is instead (``"a symbolic
        link"``, ``"a FIFO"``, ...; a symbolic link to a folder is one entry, never entered), or
        ``"a folder too deep"`` / ``"an unreadable folder"`` for a folder that was not searched.
        """
        found: list[tuple[tuple[str, ...], str]] = []
        self.names_of = {}
        self._walk(self.fd, (), found, skip)
        found.sort()
        return [("/".join(parts), kind) for parts, kind in found]

    def _walk(self, dir_fd: int, prefix: tuple[str, ...], found: list, skip: set[tuple[int, int]]) -> None:
        with os.scandir(dir_fd) as it:
            names = sorted(e.name for e in it)
        for name in names:
            if name.startswith(".") or name == "__pycache__":
                continue
            parts = (*prefix, name)
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue  # gone since it was listed
            if (st.st_dev, st.st_ino) in skip:
                continue
            if not stat.S_ISDIR(st.st_mode):
                found.append((parts, kind_of(st.st_mode)))
                if stat.S_ISREG(st.st_mode):
                    key = (st.st_dev, st.st_ino)
                    self.names_of[key] = self.names_of.get(key, 0) + 1
                continue
            if len(parts) > MAX_DEPTH:
                found.append((parts, "a folder too deep"))
                continue
            try:
                sub_fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                found.append((parts, "an unreadable folder"))
                continue
            try:
                opened = os.fstat(sub_fd)
                if (opened.st_dev, opened.st_ino) == (st.st_dev, st.st_ino):  # not swapped meanwhile
                    self._walk(sub_fd, parts, found, skip)
                else:
                    found.append((parts, "an unreadable folder"))
            finally:
                os.close(sub_fd)

    def read(self, name: str, limit: int) -> bytes:
        """The bytes of the entry ``name`` (a relative path from :meth:`entries`), or :class:`Refused`.

        A file with several names is read only if the listing found all of them in the folder.
        """
        return read_file(self.fd, tuple(name.split("/")), limit, self.names_of)
