//! Benchmarks of aac-tools; see `docs/benchmarks.md`.
