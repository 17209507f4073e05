"""The project's images, built beside the test run (see harness.PREBUILD): a private engine, the
stand-ins and both images cold then warm, as the ``images`` fixture builds them; then the engine
stays up for the deployment tests until the run writes ``stop`` (or the run's process is gone),
and is removed.

    python tests/deploy/prebuild.py FOLDER RUN_PID
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import traceback
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]

import harness as h  # noqa: E402

from tidemark.liveness import pid_alive  # noqa: E402


def main(folder: Path, run_pid: int) -> int:
    engine = h.Engine(folder / "engine")
    try:
        engine.start()
        h.log(f"engine up at {engine.socket}")
        report = h.build_project_images(engine, folder / "work")
        partial = folder / ".report.json"
        partial.write_text(json.dumps(report))
        partial.replace(folder / "report.json")
    except Exception:  # whatever failed is the report the tests read
        (folder / "error.txt").write_text(traceback.format_exc()[-4000:])
    try:
        while not (folder / "stop").exists() and pid_alive(run_pid):
            time.sleep(1)
    finally:
        engine.stop()
        shutil.rmtree(folder / "engine", ignore_errors=True)
        shutil.rmtree(folder / "work", ignore_errors=True)
        h.log("engine stopped and removed")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), int(sys.argv[2])))
