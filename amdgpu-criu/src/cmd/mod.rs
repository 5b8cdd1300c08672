//! One module per subcommand.

pub mod check;
pub mod completions;
pub mod demo;
pub mod flatten;
pub mod map;
pub mod show;
pub mod topology;
pub mod unpause;
pub mod verify;
