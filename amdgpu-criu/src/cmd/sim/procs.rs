//! The host's processes as `/proc` shows them: a process's parent, name and
//! state, and the processes below one.

use serde::Serialize;

/// One process.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ProcInfo {
    /// Its pid.
    pub pid: u32,
    /// Its parent's pid.
    pub ppid: u32,
    /// `comm`.
    pub name: String,
    /// The state letter of `/proc/PID/stat` (`R`, `S`, `T`, `Z`, ...).
    pub state: char,
}

/// `/proc/PID/stat` of `pid`, read.
pub fn info(pid: u32) -> Option<ProcInfo> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let (name, rest) = stat[open + 1..].rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some(ProcInfo {
        pid,
        ppid,
        name: name.to_owned(),
        state,
    })
}

/// Every process of the host.
fn all() -> Vec<ProcInfo> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(info)
        .collect()
}

/// The processes below `root` (not `root` itself), parents before their
/// children.
pub fn descendants(root: u32) -> Vec<ProcInfo> {
    let all = all();
    let mut out: Vec<ProcInfo> = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        let mut children: Vec<&ProcInfo> = all.iter().filter(|p| p.ppid == parent).collect();
        children.sort_by_key(|p| p.pid);
        for child in children {
            frontier.push(child.pid);
            out.push(child.clone());
        }
    }
    out
}

/// `root` and the processes below it.
pub fn tree(root: u32) -> Vec<ProcInfo> {
    info(root).into_iter().chain(descendants(root)).collect()
}

/// Whether `pid` is `ancestor` or lies below it.
pub fn is_below(pid: u32, ancestor: u32) -> bool {
    let mut at = pid;
    for _ in 0..4096 {
        if at == ancestor {
            return true;
        }
        match info(at) {
            Some(p) if p.ppid != 0 && p.ppid != at => at = p.ppid,
            _ => return false,
        }
    }
    false
}

/// The standard streams of `pid` that are terminals, as (fd, target).
pub fn terminal_streams(pid: u32) -> Vec<(u32, String)> {
    (0..3)
        .filter_map(|fd| {
            let target = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
            let target = target.to_string_lossy().into_owned();
            (target.starts_with("/dev/pts/") || target.starts_with("/dev/tty"))
                .then_some((fd, target))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_and_a_child() {
        let me = info(std::process::id()).expect("this process");
        assert_eq!(me.pid, std::process::id());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let below = descendants(std::process::id());
        assert!(below
            .iter()
            .any(|p| p.pid == child.id() && p.name == "sleep"));
        assert!(is_below(child.id(), std::process::id()));
        assert!(!is_below(std::process::id(), child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
