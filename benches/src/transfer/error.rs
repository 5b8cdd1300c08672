//! The one error of the transfer benchmarks: which step failed and why.

/// A benchmark step failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A step of a measurement failed.
    #[error("{step}: {reason}")]
    Step {
        /// What the benchmark was doing.
        step: &'static str,
        /// Why it failed.
        reason: String,
    },
}

/// Result of the transfer benchmarks.
pub type Result<T> = std::result::Result<T, BenchError>;

pub(super) fn step<E: std::fmt::Display>(step: &'static str) -> impl FnOnce(E) -> BenchError {
    move |e| BenchError::Step {
        step,
        reason: e.to_string(),
    }
}
