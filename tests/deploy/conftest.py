"""A private Docker engine for the deployment tests, the stand-in bases and the project's images
(built once per run, timed). See harness.py for the machine's rules these follow."""

from __future__ import annotations

import json
import shutil
import time

import harness as h
import pytest


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    if shutil.which("dockerd") is None and not __import__("os").path.exists("/usr/sbin/dockerd"):
        pytest.fail(
            "no dockerd: scripts/setup.sh --test-tools installs docker.io, docker-compose and mmdebstrap"
        )
    root = tmp_path_factory.mktemp("engine", numbered=True)
    engine = h.Engine(root)
    engine.start()
    try:
        yield engine
    finally:
        engine.stop()
        # the images and layers are root-owned files of the test's own engine: remove them
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def images(engine, tmp_path_factory):
    """Stand-ins, then both project images built cold, then again (warm: every layer cached).
    Returns the timings and sizes, also written to var/deploy/images.json."""
    work = tmp_path_factory.mktemp("images")
    report: dict = {"standins_s": round(h.build_standins(engine), 1)}
    for image in ("spark", "airflow"):
        report[f"{image}_cold_s"] = round(h.build_image(engine, image, work), 1)
    for image in ("spark", "airflow"):
        report[f"{image}_warm_s"] = round(h.build_image(engine, image, work), 1)
        report[f"{image}_mb"] = round(h.image_size_mb(engine, h.IMAGES[image]), 1)
    report["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out = h.REPO / "var" / "deploy"
    out.mkdir(parents=True, exist_ok=True)
    (out / "images.json").write_text(json.dumps(report, indent=2))
    h.log(f"images: {report}")
    return report
