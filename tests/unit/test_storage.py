"""Object-storage settings built from one place (tidemark.storage): the config's ``storage:`` block
plus credentials from the environment or an Airflow connection, never from the YAML file."""

from __future__ import annotations

import json

import pytest

from tidemark import object_store, storage
from tidemark.config import ConfigError, parse_config
from tidemark.resources import SetupError

BASE = {
    "pipeline": "p",
    "source": {"kind": "files", "path": "s3a://landing-bucket/in"},
    "warehouse": "s3a://lake/wh",
    "checkpoint": "s3a://lake/ck/p",
    "storage": {"endpoint": "http://127.0.0.1:19878", "path_style": True, "region": "eu-west-1"},
}


@pytest.fixture
def env(monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_every_client_gets_the_config_endpoint_and_the_environment_credentials(env):
    env.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    env.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    config = parse_config(BASE)
    options = storage.delta_options(config.table_path("events"))
    assert options == {
        "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:19878",
        "AWS_ALLOW_HTTP": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
    }
    # the landing bucket was registered by the same config
    assert storage.delta_options("s3a://landing-bucket/in")["AWS_ENDPOINT_URL"] == "http://127.0.0.1:19878"
    conf = storage.spark_conf(config)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:19878"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    # environment credentials stay in the environment (S3A's default chain reads them)
    assert not any("s3cr3t" in v for v in conf.values())


def test_local_pipelines_get_no_object_store_settings(env, tmp_path):
    config = parse_config({**BASE, "source": {"kind": "files", "path": "landing"}, "warehouse": "wh",
                           "checkpoint": "ck"}, base=tmp_path)  # fmt: skip
    assert storage.delta_options(config.table_path("events")) is None
    assert storage.spark_conf(config) == {}
    assert storage.spark_jars(config) == []
    assert storage.location(config.checkpoint) == tmp_path / "ck"


def test_an_airflow_connection_supplies_credentials_and_endpoint(env):
    connection = {
        "conn_type": "aws",
        "login": "AKIDCONN",
        "password": "conn-secret",
        "extra": json.dumps({"endpoint_url": "https://s3.example.internal"}),
    }
    env.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps(connection))
    config = parse_config({**BASE, "storage": {"airflow_connection": "lake_s3"}})
    options = storage.delta_options(config.warehouse)
    assert options["AWS_ACCESS_KEY_ID"] == "AKIDCONN" and options["AWS_SECRET_ACCESS_KEY"] == "conn-secret"
    assert options["AWS_ENDPOINT_URL"] == "https://s3.example.internal" and "AWS_ALLOW_HTTP" not in options
    conf = storage.spark_conf(config)
    assert conf["spark.hadoop.fs.s3a.access.key"] == "AKIDCONN"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"


def test_a_missing_airflow_connection_is_one_clear_line(env):
    config = parse_config({**BASE, "storage": {"airflow_connection": "no_such_conn"}})
    with pytest.raises(
        SetupError, match=r"^storage.airflow_connection: Airflow connection 'no_such_conn'"
    ) as err:
        storage.delta_options(config.warehouse)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"warehouse": "s3://lake/wh"},
            "warehouse: 's3://lake/wh': Spark reads S3 as s3a:// .*write s3a://lake/wh",
        ),
        ({"storage": {"secret_access_key": "x"}}, "storage: secret_access_key: credentials are never read"),
        ({"storage": {"access_key": "x"}}, "storage: access_key: credentials are never read"),
        ({"storage": {"endpoint": "127.0.0.1:9000"}}, "storage.endpoint: '127.0.0.1:9000' must be a URL"),
        ({"storage": {"bucket": "x"}}, "storage.bucket: unknown key"),
    ],
)
def test_bad_storage_config_is_one_line_naming_the_field(change, message):
    with pytest.raises(ConfigError, match=message) as err:
        parse_config({**BASE, **change}, source="lake.yaml")
    assert str(err.value).startswith("config lake.yaml: ") and "\n" not in str(err.value)


def test_missing_s3_jars_name_the_folder_and_the_fix(env, tmp_path):
    env.setenv("TIDEMARK_JARS_DIR", str(tmp_path))
    with pytest.raises(
        SetupError, match=r"need hadoop-aws, bundle, analyticsaccelerator-s3 in .*setup.sh --s3"
    ):
        storage.spark_jars(parse_config(BASE))


def test_object_paths_behave_like_the_paths_they_replace():
    path = storage.location("s3a://lake/ck/p")
    assert isinstance(path, storage.ObjectPath)
    assert str(path / "offsets" / "3") == "s3a://lake/ck/p/offsets/3"
    assert path.name == "p" and str(path.parent) == "s3a://lake/ck"
    assert str((path / "x.json").with_name("y.json")) == "s3a://lake/ck/p/y.json"


def test_local_atomic_write_and_listing(tmp_path):
    target = storage.location(str(tmp_path / "a" / "b.json"))
    storage.write_text_atomic(target, '{"x": 1}')
    storage.write_text_atomic(target, '{"x": 2}')
    assert json.loads(target.read_text()) == {"x": 2}
    (tmp_path / "a" / "c" / "d").mkdir(parents=True)
    (tmp_path / "a" / "c" / "d" / "e.parquet").write_bytes(b"1")
    assert object_store.list_files(str(tmp_path / "a")) == ["b.json", "c/d/e.parquet"]
    assert object_store.list_files(str(tmp_path / "missing")) == []


def test_in_stream_maintenance_is_due_when_the_schedule_came_round(tmp_path):
    from tidemark.maintenance import MAINTAINED_FILE, InStreamMaintenance

    assert parse_config(BASE).maintained_in_stream  # the warehouse is on S3: by default
    assert not parse_config({**BASE, "warehouse": str(tmp_path / "wh")}).maintained_in_stream
    assert not parse_config({**BASE, "maintenance": {"in_stream": False}}).maintained_in_stream
    config = parse_config(
        {
            **BASE,
            "warehouse": str(tmp_path / "wh"),
            "maintenance": {"schedule": "0 * * * *", "in_stream": True},
        }
    )
    maintenance = InStreamMaintenance(None, config)  # type: ignore[arg-type]  # due() needs no Spark
    now = 1_764_000_000_000  # 2025-11-24T16:00:00Z, on the hour
    assert maintenance.due(now) is False  # first batch of a new pipeline: starts the clock
    assert json.loads((tmp_path / "wh" / "p" / MAINTAINED_FILE).read_text())["maintained_at_ms"] == now
    assert maintenance.due(now + 59 * 60_000) is False  # 16:59: the next run is at 17:00
    assert maintenance.due(now + 60 * 60_000) is True
