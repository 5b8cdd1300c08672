//! Real CRIU over a served machine: finding a `criu` that works here
//! ([`Criu::find`]) and running it with this project's plugin
//! ([`dump_command`], [`restore_command`]).

mod find;
mod run;

pub use find::{builds_dir, candidates, Criu, BUILD_NAMES};
pub use run::{
    dump_command, log_errors, restore_command, DumpRequest, PluginDir, RestoreRequest, DUMP_LOG,
    RESTORE_LOG,
};
