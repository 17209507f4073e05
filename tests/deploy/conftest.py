"""A private Docker engine for the deployment tests, the stand-in bases and the project's images
(built once per run, timed). See harness.py for the machine's rules these follow."""

from __future__ import annotations

import shutil
import time

import harness as h
import pytest


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    if not h.have_dockerd():
        pytest.fail(
            "no dockerd: scripts/setup.sh --test-tools installs docker.io, docker-compose and mmdebstrap"
        )
    prebuild = h.prebuild_dir(tmp_path_factory.getbasetemp())
    if prebuild is not None:  # the run started the builds in the background: their engine
        yield h.attach_prebuild(prebuild)
        return
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
    """Stand-ins, then both project images built cold, then again (warm: every layer cached):
    by the run in the background when it started them (harness.PREBUILD), else here. Returns the
    timings and sizes, also written to var/deploy/images.json."""
    prebuild = h.prebuild_dir(tmp_path_factory.getbasetemp())
    if prebuild is not None:
        began = time.monotonic()
        report = h.wait_prebuild(prebuild)
        h.log(f"images built beside the run; waited {time.monotonic() - began:.0f} s for them")
        return report
    return h.build_project_images(engine, tmp_path_factory.mktemp("images"))
