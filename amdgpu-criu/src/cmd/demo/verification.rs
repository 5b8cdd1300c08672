//! Verification: what the restore hooks answered, each restored process
//! against its checkpoint and its uninterrupted run, the image set; and
//! after a failed dump, what the failure left behind. It only looks and
//! reports, never repairs.

use std::path::Path;

use amdgpu_image::{verify_set, DirStore, ReadLimits};
use criu_host_emulator::{RestoredTask, VmaOutcome};
use kfd_sim::workload::Workload;
use kfd_sim::Sim;

use super::report::Report;
use super::workload::Process;
use super::{Stop, STEPS_AFTER};

/// What the restore hooks answered that a successful restore would not:
/// a failed `RESUME_DEVICES_LATE`, a device mapping left untranslated.
pub(super) fn resume_problems(tasks: &[RestoredTask]) -> Vec<String> {
    let mut problems = Vec::new();
    for task in tasks {
        if task.resume_answer != 0 {
            problems.push(format!(
                "RESUME_DEVICES_LATE of pid {} answered {}",
                task.pid, task.resume_answer
            ));
        }
        for (vma, outcome) in &task.vmas {
            if !matches!(outcome, VmaOutcome::Translated { .. }) {
                problems.push(format!(
                    "pid {}: mapping of {} at {:#x} was not translated",
                    task.pid,
                    vma.path.display(),
                    vma.addr
                ));
            }
        }
    }
    problems
}

/// Compares each restored process with its checkpoint, then runs it
/// [`STEPS_AFTER`] steps and compares its fingerprint with the one the
/// checkpointed process reached after as many steps.
pub(super) fn run_after_restore(sim: &Sim, processes: &mut [Process]) -> Vec<String> {
    let mut problems = Vec::new();
    for p in processes {
        if let Err(e) = Workload::verify(sim, p.pid, &p.expected) {
            problems.push(format!("restored state: {e}"));
            continue;
        }
        let mut restored = Workload::attach(sim, p.pid);
        let ran = (0..STEPS_AFTER).try_for_each(|_| {
            restored
                .step()
                .map_err(|e| format!("pid {} cannot run after the restore: {e}", p.pid))
        });
        if let Err(problem) = ran {
            problems.push(problem);
            continue;
        }
        match (restored.fingerprint(), p.expected_after) {
            (Ok(a), Some(b)) if a == b => {}
            (Ok(a), Some(b)) => problems.push(format!(
                "pid {} diverged from its uninterrupted run (fingerprint {a:#018x}, \
                 uninterrupted {b:#018x})",
                p.pid
            )),
            (Ok(_), None) => problems.push(format!(
                "pid {}: no fingerprint of its uninterrupted run to compare with",
                p.pid
            )),
            (Err(e), _) => problems.push(format!("fingerprint: {e}")),
        }
    }
    problems
}

/// `verify_set` over the images: a summary when clean, else every problem.
pub(super) fn image_set(images: &Path) -> Result<String, Vec<String>> {
    match DirStore::open_dir(images).and_then(|store| verify_set(&store, ReadLimits::default())) {
        Ok(set) if set.is_clean() && set.files > 0 => Ok(format!(
            "image set clean ({}, {})",
            crate::out::plural(set.files as u64, "file"),
            crate::out::plural(set.checksums_verified as u64, "checksum")
        )),
        Ok(set) if set.files == 0 => Err(vec!["image set: no amdgpu image files".into()]),
        Ok(set) => Err(set
            .problems
            .iter()
            .map(|p| format!("image set: {p}"))
            .collect()),
        Err(e) => Err(vec![format!("image set: {e}")]),
    }
}

/// `text` with every `errno N` of a hook's failure named: `errno 5` reads
/// `EIO (errno 5)`.
pub(super) fn named_errnos(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("errno ") {
        let (before, after) = rest.split_at(i + "errno ".len());
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        let name = digits.parse().ok().and_then(|n| kfd_sim::Errno(n).name());
        match name {
            Some(name) => {
                out.push_str(&before[..i]);
                out.push_str(&format!("{name} (errno {digits})"));
            }
            None => {
                out.push_str(before);
                out.push_str(&digits);
            }
        }
        rest = &after[digits.len()..];
    }
    out.push_str(rest);
    out
}

/// The lines saying which injected faults fired (those `pending` no longer
/// holds): the rehearsal's own cause, named with its errno.
pub(super) fn fired(
    injected: &[kfd_sim::FaultSpec],
    pending: &[kfd_sim::FaultSpec],
) -> Vec<kfd_sim::FaultSpec> {
    injected
        .iter()
        .filter(|spec| !pending.contains(spec))
        .cloned()
        .collect()
}

/// After a failed dump: was the application left running, and what does
/// `verify` make of what is in the images directory? `fired` are the
/// injected faults that fired.
pub(super) fn checkpoint_failed(
    error: &str,
    processes: &mut [Process],
    images: &Path,
    report: &mut Report,
    fired: &[kfd_sim::FaultSpec],
) -> Stop {
    let error = named_errnos(error);
    report.lines.push(format!("checkpoint failed: {error}"));
    for spec in fired {
        report.lines.push(format!(
            "injected fault {spec} fired: that call failed with {}, as rehearsed",
            spec.errno
        ));
    }
    let unpause_failed = fired.iter().any(|s| s.op == "CRIU_OP:UNPAUSE");
    for p in processes.iter_mut() {
        let Some(app) = p.app.as_mut() else { continue };
        match app.step() {
            Ok(()) if unpause_failed => report.lines.push(format!(
                "application pid {}: unpaused when UNPAUSE was retried (the first attempt \
                 failed, the injected fault), it keeps running",
                p.pid
            )),
            Ok(()) => report.lines.push(format!(
                "application pid {}: unpaused, it keeps running",
                p.pid
            )),
            Err(e) => report.lines.push(format!(
                "application pid {}: left unable to run: {e}",
                p.pid
            )),
        }
    }
    let verdict = match DirStore::open_dir(images)
        .and_then(|store| verify_set(&store, ReadLimits::default()))
    {
        Ok(set) if set.files == 0 => "no amdgpu image files remain".to_owned(),
        Ok(set) if set.is_clean() => format!(
            "{} of the processes dumped before the failure, clean on their own \
             but not a checkpoint of the whole tree",
            crate::out::plural(set.files as u64, "file")
        ),
        Ok(set) => format!(
            "verify refuses what remains ({}, {})",
            crate::out::plural(set.files as u64, "file"),
            crate::out::plural(set.problems.len() as u64, "problem")
        ),
        Err(e) => format!("verify cannot read the directory: {e}"),
    };
    report.lines.push(format!("image directory: {verdict}"));
    Stop::Failed(format!("checkpoint failed: {error}"))
}
