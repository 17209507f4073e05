"""Where a pipeline's locations live: the local disk, or S3-compatible object storage (``s3a://``).

Every client that touches a pipeline's locations gets its settings from here, built from the one
``storage:`` block of the pipeline config (:class:`tidemark.config.StorageConfig`) and the
credentials of the environment or an Airflow connection, never from the YAML file:

* Spark (the stream, reconcile, maintenance): :func:`spark_conf` (``spark.hadoop.fs.s3a.*``) and
  :func:`spark_jars` (hadoop-aws and the AWS SDK bundle, cached by ``scripts/setup.sh --s3`` under
  ``<jar cache>/s3``, put on the classpath only when a location is on S3);
* delta-rs, the JVM-free reader and writer (Airflow sensors and triggers, the UI view,
  ``tidemark watermark``, the reports, the stream's small tables): :func:`delta_options`;
* plain files beside the tables (the run identity, the heartbeat, Spark's checkpoint logs that
  Tidemark reads): :func:`location`, a :class:`pathlib.Path` for a local path and an
  :class:`ObjectPath` (the same few methods, over :mod:`pyarrow.fs`) for an ``s3a://`` URI.

Parsing a config registers its storage block for the buckets it names (:func:`register`), so a
module that only has a table's URI (``tables.open_table``) finds the options of its bucket.

Delta's commit protocol needs put-if-absent. delta-rs (1.x) gets it from S3's conditional writes
(``If-None-Match``), so any number of delta-rs writers are safe. Spark's Delta on ``s3a://`` uses
``S3SingleDriverLogStore``: safe only while one Spark driver writes a table; Tidemark keeps it so
(README, "Object storage").
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import functools
import json
import os
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from tidemark.resources import SetupError, find_jars, jars_dir

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from tidemark.config import PipelineConfig

OBJECT_SCHEMES = ("s3a", "s3")
S3_JARS = ("hadoop-aws-", "bundle-", "analyticsaccelerator-s3-")
S3A_SECRET_KEYS = ("fs.s3a.access.key", "fs.s3a.secret.key", "fs.s3a.session.token")


@dataclass(frozen=True)
class Settings:
    """A config's ``storage:`` block (:class:`tidemark.config.StorageConfig`), as registered."""

    endpoint: str | None = None
    region: str = "us-east-1"
    path_style: bool = False
    airflow_connection: str | None = None


# bucket -> the storage block of the config that names it (see register)
_BUCKETS: dict[str, Settings] = {}
# Reads an Airflow connection (login, password, extra): set by the Airflow side
# (tidemark_airflow), which may import Airflow; the core reads AIRFLOW_CONN_<ID> itself.
ConnectionReader = Callable[[str], "dict[str, Any]"]
_connection_reader: ConnectionReader | None = None


def scheme(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else "file"


def is_object_store(uri: str | None) -> bool:
    return uri is not None and scheme(uri) in OBJECT_SCHEMES


def bucket_of(uri: str) -> str:
    return uri.split("://", 1)[1].split("/", 1)[0]


def config_locations(config: PipelineConfig) -> list[str]:
    return [x for x in (config.warehouse, config.checkpoint, config.source.path) if x]


def uses_object_store(config: PipelineConfig) -> bool:
    return any(is_object_store(x) for x in config_locations(config))


def settings_of(config: PipelineConfig) -> Settings:
    block = config.storage
    return Settings(block.endpoint, block.region, block.path_style, block.airflow_connection)


def register(config: PipelineConfig) -> None:
    """Remember ``config``'s storage block for the buckets its locations name."""
    for uri in config_locations(config):
        if is_object_store(uri):
            _BUCKETS[bucket_of(uri)] = settings_of(config)


def storage_for(uri: str) -> Settings:
    return _BUCKETS.get(bucket_of(uri)) or Settings()


def set_connection_reader(reader: ConnectionReader | None) -> None:
    """How ``storage.airflow_connection`` is read in an Airflow process (see _connection_reader)."""
    global _connection_reader
    _connection_reader = reader


# -- credentials ----------------------------------------------------------------------------------


def credentials(storage: Settings) -> dict[str, str]:
    """``access_key``, ``secret_key`` and maybe ``session_token`` and ``endpoint``: from the Airflow
    connection ``storage.airflow_connection`` (login, password, extra ``endpoint_url``), else from
    ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``. Empty when neither is
    set: each client then uses its own default chain (instance profile, web identity, ...)."""
    if storage.airflow_connection:
        return _connection_credentials(storage.airflow_connection)
    found = {
        "access_key": os.environ.get("AWS_ACCESS_KEY_ID", ""),
        "secret_key": os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
        "session_token": os.environ.get("AWS_SESSION_TOKEN", ""),
    }
    return {k: v for k, v in found.items() if v}


def _connection_credentials(conn_id: str) -> dict[str, str]:
    try:
        conn = _connection_reader(conn_id) if _connection_reader is not None else _env_connection(conn_id)
    except Exception as exc:  # no such connection, or not readable here
        detail = str(exc).splitlines()[0] if str(exc) else "no detail"
        raise SetupError(
            f"storage.airflow_connection: Airflow connection {conn_id!r} could not be read "
            f"({type(exc).__name__}: {detail})"
        ) from None
    extra = conn.get("extra") or {}
    found = {
        "access_key": conn.get("login") or "",
        "secret_key": conn.get("password") or "",
        "session_token": str(extra.get("aws_session_token") or ""),
        "endpoint": str(extra.get("endpoint_url") or ""),
    }
    return {k: v for k, v in found.items() if v}


def _env_connection(conn_id: str) -> dict[str, Any]:
    """``AIRFLOW_CONN_<ID>`` (Airflow's JSON or URI form) as login, password and extra, outside
    Airflow (a process Airflow started passes the connection so: tidemark_airflow.hooks)."""
    name = f"AIRFLOW_CONN_{conn_id.upper()}"
    raw = os.environ.get(name)
    if raw is None:
        raise LookupError(f"{name} is not set and this is not an Airflow process")
    if raw.lstrip().startswith("{"):
        data = json.loads(raw)
        extra = data.get("extra") or {}
        return {**data, "extra": json.loads(extra) if isinstance(extra, str) else extra}
    url = urlsplit(raw)
    return {
        "login": unquote(url.username or ""),
        "password": unquote(url.password or ""),
        "extra": dict(parse_qsl(url.query)),
    }


def endpoint(storage: Settings, creds: dict[str, str]) -> str | None:
    return storage.endpoint or creds.get("endpoint") or None


# -- errors -----------------------------------------------------------------------------------------


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


# -- per-client options ---------------------------------------------------------------------------


def delta_options(uri: str) -> dict[str, str] | None:
    """delta-rs ``storage_options`` for ``uri``; None for a local path."""
    if not is_object_store(uri):
        return None
    storage = storage_for(uri)
    creds = credentials(storage)
    options = {"AWS_REGION": storage.region}
    url = endpoint(storage, creds)
    if url:
        options["AWS_ENDPOINT_URL"] = url
        if url.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false" if storage.path_style else "true"
    for key, name in (
        ("access_key", "AWS_ACCESS_KEY_ID"),
        ("secret_key", "AWS_SECRET_ACCESS_KEY"),
        ("session_token", "AWS_SESSION_TOKEN"),
    ):
        if key in creds:
            options[name] = creds[key]
    return options


def spark_conf(config: PipelineConfig) -> dict[str, str]:
    """``spark.hadoop.fs.s3a.*`` for a pipeline with S3 locations (empty otherwise). Credentials
    from the environment stay there (S3A's default chain reads them); those of an Airflow
    connection are passed as ``fs.s3a.access.key``/``secret.key``, which Spark redacts in its UI
    and logs (``spark.redaction.regex``)."""
    if not uses_object_store(config):
        return {}
    storage = settings_of(config)
    creds = credentials(storage)
    conf = {
        "spark.hadoop.fs.s3a.endpoint.region": storage.region,
        "spark.hadoop.fs.s3a.path.style.access": str(storage.path_style).lower(),
    }
    url = endpoint(storage, creds)
    if url:
        conf["spark.hadoop.fs.s3a.endpoint"] = url
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(url.startswith("https://")).lower()
    if storage.airflow_connection and "access_key" in creds:
        conf["spark.hadoop.fs.s3a.access.key"] = creds["access_key"]
        conf["spark.hadoop.fs.s3a.secret.key"] = creds.get("secret_key", "")
        if "session_token" in creds:
            conf["spark.hadoop.fs.s3a.session.token"] = creds["session_token"]
            conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
                "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
            )
    return conf


def spark_jars(config: PipelineConfig) -> list[Path]:
    """hadoop-aws, the AWS SDK bundle and the analytics accelerator, when ``config`` has an S3
    location; a one-line SetupError when ``scripts/setup.sh --s3`` has not cached them."""
    if not uses_object_store(config):
        return []
    folder = jars_dir() / "s3"
    jars, missing = find_jars(folder, S3_JARS)
    if missing:
        raise SetupError(
            f"s3a:// locations need {', '.join(p.rstrip('-') for p in missing)} in {folder}: run "
            "`scripts/setup.sh --s3` once with network access"
        )
    return jars


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


Location = Path | ObjectPath


def location(uri: str | os.PathLike[str]) -> Location:
    """A local path as :class:`~pathlib.Path`, an ``s3a://`` URI as :class:`ObjectPath`."""
    text = os.fspath(uri)
    return ObjectPath(text) if is_object_store(text) else Path(text.removeprefix("file://"))


def write_text_atomic(path: Location, text: str) -> None:
    """Readers see the old content or the new, never a part, and so does a restart after a crash
    or a power loss; one PUT on an object store.

    On a disk: a temporary file of this write's own (two writers of one file in one process, the
    heartbeat and the batch, must not rename or remove each other's) is written and fsynced, then
    renamed over the target and the directory fsynced, so the rename is durable too (without the
    fsyncs a power loss can leave the renamed file empty). A write that fails (a full disk, an I/O
    error) removes the temporary file and raises: the old content stays, nothing is left behind
    to fill the directory on every retry."""
    if isinstance(path, ObjectPath):
        path.write_text(text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temporary(path)
    try:
        try:
            data = memoryview(text.encode("utf-8"))
            while data:
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(path.parent)


def _create_temporary(path: Path) -> tuple[int, Path]:
    """A new, empty file beside ``path`` that no other writer uses: a random name, created
    exclusively (with the permissions a plain write gets under the umask, unlike mkstemp's 0600:
    Airflow may read these files as another user)."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path.parent}: no free temporary name for {path.name} in 100 tries")


def _fsync_directory(folder: Path) -> None:
    """Make a rename in ``folder`` durable. A file system that cannot fsync a directory says so
    (EINVAL, ENOTSUP): the rename is then as durable as that file system makes it."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    finally:
        os.close(fd)
