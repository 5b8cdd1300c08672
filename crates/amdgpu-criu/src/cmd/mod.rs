//! One module per subcommand.

pub mod map;
pub mod show;
pub mod verify;
