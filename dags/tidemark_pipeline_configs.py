"""
### Tidemark pipeline configs that do not load

Creates no DAG. Every other Tidemark DAG file creates the DAGs of the pipelines whose configs (the
YAML files in `$TIDEMARK_PIPELINES_DIR`) load, and leaves out those that do not, so one bad file
never takes down the other pipelines. This file is where the bad ones show: while any config does
not load, it fails with one Airflow import error that names each bad file with its one-line
reason (an unknown key, a bad value, a pipeline name two files use). Fix the file and the error
goes at the next parse; the pipeline's DAGs appear.
"""

from tidemark_airflow.pipelines import config_errors

if (error := config_errors()) is not None:
    raise error
