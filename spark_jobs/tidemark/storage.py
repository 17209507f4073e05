"""Where a pipeline's locations live: the local disk, or S3-compatible object storage (``s3a://``).

Every client that touches a pipeline's locations gets its settings from here, built from the one
``storage:`` block of the pipeline config (:class:`tidemark.config_blocks.StorageConfig`,
registered for its buckets: :mod:`tidemark.storage_settings`) and the credentials of the
environment or an Airflow connection, never from the YAML file:

* Spark (the stream, reconcile, maintenance): :func:`spark_conf` (``spark.hadoop.fs.s3a.*``) and
  :func:`spark_jars` (hadoop-aws and the AWS SDK bundle, cached by ``scripts/setup.sh --s3`` under
  ``<jar cache>/s3``, put on the classpath only when a location is on S3);
* delta-rs, the JVM-free reader and writer (Airflow sensors and triggers, the UI view,
  ``tidemark watermark``, the reports, the stream's small tables): :func:`delta_options`;
* plain files beside the tables (the run identity, the heartbeat, Spark's checkpoint logs that
  Tidemark reads): :func:`location`, a :class:`pathlib.Path` for a local path and an
  :class:`~tidemark.object_store.ObjectPath` (the same few methods, over :mod:`pyarrow.fs`:
  :mod:`tidemark.object_store`) for an ``s3a://`` URI.

Delta's commit protocol needs put-if-absent. delta-rs (1.x) gets it from S3's conditional writes
(``If-None-Match``), so any number of delta-rs writers are safe. Spark's Delta on ``s3a://`` uses
``S3SingleDriverLogStore``: safe only while one Spark driver writes a table; Tidemark keeps it so
(README, "Object storage").
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from pathlib import Path

from tidemark.errors import SetupError
from tidemark.object_store import ObjectPath
from tidemark.resources import find_jars, jars_dir
from tidemark.storage_settings import StoredPipeline, credentials, endpoint, is_object_store, storage_for

S3_JARS = ("hadoop-aws-", "bundle-", "analyticsaccelerator-s3-")
S3A_SECRET_KEYS = ("fs.s3a.access.key", "fs.s3a.secret.key", "fs.s3a.session.token")


def config_locations(config: StoredPipeline) -> list[str]:
    return list(config.locations)


def uses_object_store(config: StoredPipeline) -> bool:
    return any(is_object_store(x) for x in config.locations)


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


def spark_conf(config: StoredPipeline) -> dict[str, str]:
    """``spark.hadoop.fs.s3a.*`` for a pipeline with S3 locations (empty otherwise). Credentials
    from the environment stay there (S3A's default chain reads them); those of an Airflow
    connection are passed as ``fs.s3a.access.key``/``secret.key``, which Spark redacts in its UI
    and logs (``spark.redaction.regex``)."""
    if not uses_object_store(config):
        return {}
    storage = config.storage_settings
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


def spark_jars(config: StoredPipeline) -> list[Path]:
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
