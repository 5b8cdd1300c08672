//! `amdgpu-criu unpause --pid PID`: resume the GPU queues of a process that
//! a dump left paused (CRIU killed between `PROCESS_INFO` and `UNPAUSE`).
//!
//! Seizes the process with ptrace (the kernel takes `CRIU_OP` only from the
//! ptrace parent), takes its `/dev/kfd` fd with `pidfd_getfd`, issues
//! `UNPAUSE` and detaches (`amdgpu_checkpoint::recover`). Never thaws a
//! frozen cgroup: it reports it with the command that does. Exit 0 when the
//! queues run (unpaused now, or were not paused), 1 when they could not be
//! unpaused, 2 on usage errors.

use std::process::ExitCode;

use amdgpu_checkpoint::recover::{unpause_process, RecoverError};
use kfd::HostDriver;

/// Arguments of `unpause`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu unpause --pid 4242      # after CRIU was killed mid-dump

Needs root (CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN for CRIU_OP, and
ptrace access to the process). Refuses while another tracer (a CRIU that
is still dumping) holds the process.

Exit status: 0 the queues run (unpaused, or they were not paused),
1 they could not be unpaused (the reason is printed), 2 usage errors")]
pub struct Args {
    /// The process whose GPU queues to resume.
    #[arg(long)]
    pub pid: u32,
}

/// Runs `unpause`.
pub fn run(args: Args) -> ExitCode {
    match unpause_process(&HostDriver, args.pid) {
        Ok(done) => {
            if done.was_paused {
                println!(
                    "process {}: GPU queues unpaused (through its fd {})",
                    done.pid, done.kfd_fd
                );
            } else {
                println!(
                    "process {}: GPU queues were not paused; nothing to do",
                    done.pid
                );
            }
            if done.detach_deferred {
                println!(
                    "process {}: did not reach a ptrace stop; it is detached as this command exits",
                    done.pid
                );
            }
            if let Some(frozen) = &done.frozen {
                println!(
                    "process {} is still frozen in {frozen}: its CPU threads do not run; \
                     thaw it with: {}",
                    done.pid,
                    frozen.thaw_command()
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("amdgpu-criu unpause: {e}");
            if let RecoverError::NoSuchProcess { .. } = e {
                eprintln!("amdgpu-criu unpause: nothing to recover");
            }
            ExitCode::from(1)
        }
    }
}
