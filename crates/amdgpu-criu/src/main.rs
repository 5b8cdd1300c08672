//! amdgpu-criu: command-line tool (subcommands are added by their issues).
fn main() {}
