"""The record parser's JVM fast path (Java source), shipped as ``tidemark.jvm`` package data;
set-up compiles it into the jar cache (scripts/build_udf.sh)."""
