"""Tidemark: exactly-once streaming with a precise watermark, reconciled against batch."""

import os

# delta-rs logs through Rust's env_logger, which reads RUST_LOG once, when ``deltalake`` is
# imported: without this, a read of object storage without credentials prints the AWS SDK's WARN
# lines (instance metadata, config files) before Tidemark's one-line error
# (tidemark.object_store.StorageError). A RUST_LOG the user sets wins.
os.environ.setdefault("RUST_LOG", "error")
