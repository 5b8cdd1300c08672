//! One module per subcommand.

pub mod show;
pub mod verify;
