//! One module per subcommand.

pub mod completions;
pub mod map;
pub mod show;
pub mod topology;
pub mod verify;
