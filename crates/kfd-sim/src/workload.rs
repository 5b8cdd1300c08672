//! Workloads for tests (being written).
