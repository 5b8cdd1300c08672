//! CRIU private data (being written).
