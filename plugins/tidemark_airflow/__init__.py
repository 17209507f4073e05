"""Tidemark's Airflow side: operators, sensors, triggers, notifiers and the UI view.

DAG files in ``dags/`` only wire these together; the data work lives in ``spark_jobs/tidemark``.
"""
