"""Ship Tidemark's code to Spark executors, and the spark-submit line for a cluster.

On a cluster the executors must run the driver's copy of ``tidemark``: the code archive
(:func:`tidemark.archive.code_archive`) goes to them through ``--py-files``.

``python -m tidemark.packaging archive`` prints the archive's path;
``python -m tidemark.packaging submit JOB.py --master URL [-- job args]`` runs spark-submit with
the cached jars (``--jars``) and the archive (``--py-files``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tidemark.archive import code_archive
from tidemark.resources import JOBS, SetupError, entrypoint, spark_home
from tidemark.sparkenv import cached_jars, driver_class_path, jvm_conf

__all__ = ["code_archive", "spark_submit_command", "submit_env"]


def spark_submit_command(
    job: str | os.PathLike[str],
    job_args: Sequence[str] = (),
    *,
    master: str,
    archive: Path | None = None,
    conf: dict[str, str] | None = None,
) -> list[str]:
    """``spark-submit`` for ``job`` (a path, or the name of a shipped job: ``stream_job.py``, ...).

    Client deploy mode: the driver runs here (Python applications cannot use cluster mode on a
    standalone master); the executors get the jars from the cache and the code archive.
    """
    script = Path(job)
    if not script.is_file() and script.stem in JOBS and script.name in (script.stem, f"{script.stem}.py"):
        script = entrypoint(script.stem)
    if not script.is_file():
        raise FileNotFoundError(f"spark job {job}: no such file (nor a shipped job: {', '.join(JOBS)})")
    jars = cached_jars()
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        "--master",
        master,
        "--deploy-mode",
        "client",
        "--jars",
        ",".join(str(j) for j in jars),
        "--py-files",
        str(archive or code_archive()),
    ]
    for key, value in {**jvm_conf(), **driver_class_path(jars), **(conf or {})}.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, str(script), *job_args]


def submit_env(base: dict[str, str] | None = None, master: str | None = None) -> dict[str, str]:
    """The environment for spark-submit: the driver runs this Python unless told otherwise.

    Executors on a cluster run the Python their configuration names (``spark.pyspark.python``,
    e.g. in the pipeline's ``spark.conf`` or ``--conf``; else the workers' ``PYSPARK_PYTHON`` or
    ``python3``): this machine's interpreter path means nothing on a worker. Only a local master
    (``local[...]``, executors in this process tree) gets this Python for them too.
    """
    env = dict(os.environ if base is None else base)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master is None or master.startswith("local"):
        env.setdefault("PYSPARK_PYTHON", sys.executable)
    return env


def _parse_conf(pairs: Sequence[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"--conf wants KEY=VALUE, got {pair!r}")
        conf[key] = value
    return conf


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tidemark.packaging",
        description="Build the code archive executors run, or spark-submit a job with it.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("archive", help="build (if needed) and print the code archive's path")
    submit = sub.add_parser(
        "submit",
        help="spark-submit a job with the cached jars and the code archive",
        description="Arguments after `--` go to the job. Example: "
        "submit stream_job.py --master spark://127.0.0.1:7077 -- --config F --once",
    )
    submit.add_argument(
        "job",
        help="script, or a shipped job (stream_job.py, reconcile_job.py, quality_job.py, maintain_job.py)",
    )
    submit.add_argument(
        "--master",
        default=os.environ.get("TIDEMARK_SPARK_MASTER", "spark://127.0.0.1:7077"),
        help="cluster URL (default $TIDEMARK_SPARK_MASTER or %(default)s)",
    )
    submit.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra spark conf")
    submit.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args, job_args = parser.parse_args(argv[:split]), argv[split + 1 :]
    try:
        if args.command == "archive":
            print(code_archive())
            return 0
        command = spark_submit_command(args.job, job_args, master=args.master, conf=_parse_conf(args.conf))
    except (SetupError, FileNotFoundError, argparse.ArgumentTypeError) as exc:
        print(f"tidemark: error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(" ".join(command))
        return 0
    return subprocess.call(command, env=submit_env(master=args.master))


if __name__ == "__main__":
    sys.exit(main())
