"""Object storage through :mod:`pyarrow.fs`: the S3 filesystem of a location, listing, upload,
buckets, files beside the tables (:class:`ObjectPath`) and one-line errors.

The filesystem of an ``s3a://`` URI is built from the settings registered for its bucket and
the current credentials (:mod:`tidemark.storage_settings`), one client per distinct settings;
a local path gets pyarrow's local filesystem. An object store's error while reading a location
becomes one :class:`StorageError` line naming the location and the cause (:func:`reading`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tidemark.errors import SetupError
from tidemark.storage_settings import Settings, credentials, endpoint, is_object_store, storage_for

if TYPE_CHECKING:
    import pyarrow.fs as pafs


class StorageError(SetupError):
    """An object-storage location could not be read: one line naming the location and the cause
    (delta-rs says it in a multi-line chain with terminal colours)."""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NO_CREDENTIALS = (
    "no credentials found",
    "credential provider was not enabled",
    "access key not in",
    "error occurred while loading credentials",
)


def storage_error(uri: str, exc: BaseException) -> StorageError:
    """``exc`` (an object store client's error reading ``uri``) as one line: the location and the
    cause (no credentials, a refused connection, else the innermost cause of the chain)."""
    text = _ANSI.sub("", str(exc))
    lower = text.lower()
    if any(marker in lower for marker in _NO_CREDENTIALS):
        cause = (
            "no S3 credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "or storage.airflow_connection)"
        )
    elif "connection refused" in lower or "could not connect to server" in lower:
        url = endpoint(storage_for(uri), {})
        cause = f"connection refused by {url} (storage.endpoint)" if url else "connection refused"
    elif "; Details: " in text:  # pyarrow's S3 client: the last detail is the cause
        cause = text.rsplit("; Details: ", 1)[1].strip()
    else:
        lines = [line.strip().lstrip("\u21b3").strip() for line in text.splitlines() if line.strip()]
        cause = lines[-1] if lines else type(exc).__name__
    return StorageError(f"cannot read {uri}: {cause}")


@contextlib.contextmanager
def reading(uri: str) -> Iterator[None]:
    """Turn an object store's error while reading ``uri`` into a one-line :class:`StorageError`
    (a local path's errors pass unchanged)."""
    try:
        yield
    except OSError as exc:
        if not is_object_store(uri) or isinstance(exc, FileNotFoundError):
            raise
        raise storage_error(uri, exc) from None


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem for ``uri`` and the path inside it."""
    import pyarrow.fs as pafs

    if not is_object_store(uri):
        return pafs.LocalFileSystem(), uri.removeprefix("file://")
    return _s3_filesystem(storage_for(uri)), uri.split("://", 1)[1].rstrip("/")


def _s3_filesystem(storage: Settings, **extra: object) -> pafs.S3FileSystem:
    """The S3 filesystem of ``storage`` with the current credentials, one per distinct settings
    (a heartbeat every few seconds need not build a client each time)."""
    return _cached_s3(storage, tuple(sorted(credentials(storage).items())), tuple(sorted(extra.items())))


@functools.lru_cache(maxsize=16)
def _cached_s3(
    storage: Settings, creds_items: tuple[tuple[str, str], ...], extra: tuple[tuple[str, object], ...]
) -> pafs.S3FileSystem:
    import pyarrow.fs as pafs

    creds = dict(creds_items)
    url = endpoint(storage, creds)
    kwargs: dict[str, object] = {"region": storage.region, "force_virtual_addressing": not storage.path_style}
    if url:
        kwargs["scheme"], _, kwargs["endpoint_override"] = url.partition("://")
    if "access_key" in creds:
        kwargs.update(access_key=creds["access_key"], secret_key=creds.get("secret_key"))
        if "session_token" in creds:
            kwargs["session_token"] = creds["session_token"]
    return pafs.S3FileSystem(**kwargs, **dict(extra))


# -- plain files ----------------------------------------------------------------------------------


def list_files(uri: str) -> list[str]:
    """Every file under ``uri``, recursively, as paths relative to it (empty when it is absent)."""
    import pyarrow.fs as pafs

    fs, root = filesystem(uri)
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    prefix = root.rstrip("/") + "/"
    return sorted(
        i.path[len(prefix) :] for i in infos if i.type == pafs.FileType.File and i.path.startswith(prefix)
    )


def upload_tree(local: str | os.PathLike[str], uri: str) -> int:
    """Copy every file under the local directory ``local`` to ``uri`` in name order (one PUT each,
    so an object store gives them upload-order modification times); the number copied."""
    import pyarrow.fs as pafs

    fs, root = filesystem(uri)
    source = Path(local)
    files = sorted(p for p in source.rglob("*") if p.is_file())
    for file in files:
        pafs.copy_files(str(file), f"{root}/{file.relative_to(source).as_posix()}", destination_filesystem=fs)
    return len(files)


def remove_tree(uri: str) -> None:
    """Delete everything under ``uri`` (nothing when it is absent)."""
    import pyarrow.fs as pafs

    fs, root = filesystem(uri)
    if fs.get_file_info(root).type != pafs.FileType.NotFound:
        fs.delete_dir(root)


def ensure_bucket(uri: str) -> bool:
    """Create the bucket of ``uri`` when it does not exist; True when it was created."""
    import pyarrow.fs as pafs

    fs, root = filesystem(uri)
    bucket = root.split("/", 1)[0]
    if fs.get_file_info(bucket).type != pafs.FileType.NotFound:
        return False
    _s3_filesystem(storage_for(uri), allow_bucket_creation=True).create_dir(bucket)
    return True


class ObjectPath:
    """The few :class:`pathlib.Path` methods Tidemark uses on files beside its tables, for an
    object-store URI. Object stores have no directories: ``mkdir`` does nothing, a "directory"
    exists while a key lies under it, and a single PUT is atomic (``write_text`` needs no
    temporary file)."""

    __slots__ = ("uri",)

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        return f"ObjectPath({self.uri!r})"

    def __fspath__(self) -> str:  # for os.fspath in messages; never opened locally
        return self.uri

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    def __truediv__(self, part: str) -> ObjectPath:
        return ObjectPath(f"{self.uri}/{part}")

    @property
    def name(self) -> str:
        return self.uri.rsplit("/", 1)[1]

    @property
    def parent(self) -> ObjectPath:
        return ObjectPath(self.uri.rsplit("/", 1)[0])

    def with_name(self, name: str) -> ObjectPath:
        return self.parent / name

    def _fs(self) -> tuple[pafs.FileSystem, str]:
        return filesystem(self.uri)

    def _type(self) -> int:
        import pyarrow.fs as pafs

        fs, path = self._fs()
        with reading(self.uri):
            info = fs.get_file_info(path)
        return {pafs.FileType.File: 1, pafs.FileType.Directory: 2}.get(info.type, 0)

    def is_file(self) -> bool:
        return self._type() == 1

    def is_dir(self) -> bool:
        return self._type() == 2

    def exists(self) -> bool:
        return self._type() != 0

    def read_bytes(self) -> bytes:
        fs, path = self._fs()
        try:
            with fs.open_input_stream(path) as stream:
                return bytes(stream.read())
        except FileNotFoundError:
            raise
        except OSError as exc:
            if "not found" in str(exc).lower() or "NoSuchKey" in str(exc):
                raise FileNotFoundError(self.uri) from None
            raise storage_error(self.uri, exc) from None

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def write_bytes(self, data: bytes) -> int:
        fs, path = self._fs()
        with fs.open_output_stream(path) as stream:
            stream.write(data)
        return len(data)

    def write_text(self, text: str, encoding: str = "utf-8") -> int:
        return self.write_bytes(text.encode(encoding))

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        return None

    def iterdir(self) -> Iterator[ObjectPath]:
        import pyarrow.fs as pafs

        fs, path = self._fs()
        with reading(self.uri):
            infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        for info in sorted(infos, key=lambda i: i.path):
            yield self / info.base_name

    def glob(self, pattern: str) -> Iterator[ObjectPath]:
        """Names directly under this path matching ``pattern`` (no ``**``, no ``/``)."""
        return (p for p in self.iterdir() if fnmatch.fnmatchcase(p.name, pattern))

    def unlink(self, missing_ok: bool = False) -> None:
        fs, path = self._fs()
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def rename(self, target: Path | ObjectPath) -> ObjectPath:
        """Copy every object to ``target``, then delete this prefix (not atomic: object stores
        have no rename; callers use it only to move a stopped job's checkpoint aside)."""
        import pyarrow.fs as pafs

        if not isinstance(target, ObjectPath):
            raise TypeError(f"cannot move {self.uri} to the local path {target}")
        fs, path = self._fs()
        _, dest = target._fs()
        if self.is_file():
            fs.copy_file(path, dest)
            fs.delete_file(path)
            return target
        for info in fs.get_file_info(pafs.FileSelector(path, recursive=True)):
            if info.type == pafs.FileType.File:
                fs.copy_file(info.path, dest + info.path[len(path) :])
        fs.delete_dir(path)
        return target
