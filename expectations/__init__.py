"""The Great Expectations suites, shipped with the package as ``tidemark.expectations``
(found with ``tidemark.resources.suites_dir()``)."""
