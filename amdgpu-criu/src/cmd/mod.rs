//! One module per subcommand.

pub mod check;
pub mod completions;
pub mod decode;
pub mod demo;
pub mod doctor;
pub mod flatten;
pub mod map;
pub mod ps;
pub mod show;
pub mod sim;
pub mod topology;
pub mod unpacked;
pub mod unpause;
pub mod verify;
