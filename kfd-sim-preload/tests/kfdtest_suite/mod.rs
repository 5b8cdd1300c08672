//! The kfdtest acceptance run's parts: running one test (`run`) and the
//! classification kept in the repository (`lists`).

pub mod lists;
pub mod run;
