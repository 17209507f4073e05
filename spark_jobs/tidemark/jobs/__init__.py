"""spark-submit entrypoints: thin scripts that run one ``tidemark`` command in the driver.

``stream_job.py`` (``tidemark stream``), ``reconcile_job.py`` (``tidemark reconcile``),
``quality_job.py`` (``tidemark report --validate --spark``) and ``maintain_job.py``
(``tidemark maintain``). They ship inside the package, so an
installed wheel finds them with :func:`tidemark.resources.entrypoint` (a real file path for
spark-submit), never through a checkout's layout.
"""
