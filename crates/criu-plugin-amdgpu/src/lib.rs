//! placeholder, replaced by the crate's implementation
