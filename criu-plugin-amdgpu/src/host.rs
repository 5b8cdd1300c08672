//! What the host CRIU offers the plugin: the facts of its plugin interface
//! (the descriptor's name, its hook slots, the hook ids and the stages) and
//! the host profile, the `max_hooks` this CRIU accepts and what follows from
//! it. The C ABI ([`crate::abi`]) and the plugin's process-wide state
//! (`runtime`) both read them here; the hooks read the stage.
//!
//! # One build for every CRIU
//!
//! CRIU refuses a plugin whose `max_hooks` exceeds its own
//! `CR_PLUGIN_HOOK__MAX` (10 for v3.17–v3.19, 12 for v4.0–v4.1, 13 for v4.2,
//! 15 after, 16 since criu#2841 added `UPDATE_INETSK` = 15) as a "Corrupted
//! plugin", and reads `hooks[0..max_hooks]`, calling only the non-NULL
//! ones. So the descriptor has 16 slots, NULL where the plugin implements
//! nothing (`UPDATE_INETSK` among them), and the
//! value is chosen at load time: an ELF constructor (an `.init_array` entry,
//! run by `dlopen` before it returns, i.e. before CRIU reads the descriptor)
//! inspects the host ([`host_profile`]) and stores the result into the
//! descriptor's `max_hooks` ([`crate::abi::CR_PLUGIN_DESC`]),
//! an `AtomicU32` (same size, alignment and bit pattern as C's `unsigned
//! int`; CRIU's plain reads after `dlopen` returned are ordered after the
//! constructor by the loader's lock). In order:
//!
//! 1. `AMDGPU_PLUGIN_MAX_HOOKS=<10..=16>` in the environment wins (an invalid
//!    value is logged and ignored), capped at CRIU's maximum when step 2
//!    finds it: a value above would only make CRIU refuse the plugin (forcing
//!    15 on CRIU 4.1.1, whose maximum is 12, did). Without the hook table the
//!    override is taken as given: it exists for hosts the detection cannot
//!    see into.
//! 2. The size of CRIU's `cr_plugin_ctl` symbol (`struct list_head head;
//!    struct list_head hook_chain[CR_PLUGIN_HOOK__MAX]`, global in every CRIU
//!    since the descriptor API of v1.4, exported because criu is linked
//!    `-rdynamic`), read with `dladdr1(RTLD_DL_SYMENT)`: CRIU's exact maximum.
//!    Newer CRIU with more hooks than we know gets our 16.
//! 3. Marker symbols: `check_and_remove_inventory_plugin` (inventory gating,
//!    v4.1) → 12; `criu_get_image_dir` (any CRIU) → 10. Underestimating is
//!    safe — a smaller `max_hooks` is always accepted; hooks go missing, with
//!    the fallbacks below.
//! 4. No CRIU in the process (tests, the emulator): 16.
//!
//! # What the plugin does where a hook is missing
//!
//! - No `DUMP_DEVICES_LATE` (max_hooks < 15): the KFD process is unpaused
//!   inside `DUMP_EXT_FILE` right after its checkpoint and BO drain, as the
//!   plugins of v3.17–v4.2 did.
//! - No `RESTORE_INIT` (< 14): nothing is prepared before fork; state that
//!   would be shared between restored tasks is created lazily in the task.
//! - No `POST_FORKING` (< 13): BO contents are always restored inside the
//!   restored task (this build restores in the task anyway).
//! - `RESTORE_EXT_FILE` got its `bool *retry_needed` argument in the same
//!   post-v4.2 series that added `RESTORE_INIT` (fb02dbf68, db0ec806d). On
//!   older CRIU the second argument register holds garbage, so it is written
//!   only when `max_hooks >= 14`; then it is always written, because CRIU
//!   leaves its variable uninitialised.
//!

use std::ffi::{c_int, c_void, CStr, CString};
use std::sync::OnceLock;

/// The descriptor name, also the plugin's key in CRIU's inventory.
pub const PLUGIN_NAME: &CStr = c"amdgpu_plugin";

/// Number of hook slots in the descriptor (`CR_PLUGIN_HOOK__MAX` of CRIU
/// HEAD: 15 after v4.2, 16 since criu#2841 added `UPDATE_INETSK`).
pub const HOOK_SLOTS: usize = 16;

/// Hook ids (`CR_PLUGIN_HOOK__*`).
pub mod hook {
    /// `DUMP_EXT_FILE(int fd, int id)`.
    pub const DUMP_EXT_FILE: usize = 2;
    /// `RESTORE_EXT_FILE(int id, bool *retry_needed)`.
    pub const RESTORE_EXT_FILE: usize = 3;
    /// `HANDLE_DEVICE_VMA(int fd, const struct stat *st)`.
    pub const HANDLE_DEVICE_VMA: usize = 7;
    /// `UPDATE_VMA_MAP(path, addr, old_pgoff, *new_pgoff, *plugin_fd)`.
    pub const UPDATE_VMA_MAP: usize = 8;
    /// `RESUME_DEVICES_LATE(int pid)`.
    pub const RESUME_DEVICES_LATE: usize = 9;
    /// `POST_FORKING(void)`.
    pub const POST_FORKING: usize = 12;
    /// `RESTORE_INIT(void)`.
    pub const RESTORE_INIT: usize = 13;
    /// `DUMP_DEVICES_LATE(int id)` (CRIU passes the root pid).
    pub const DUMP_DEVICES_LATE: usize = 14;
    /// `UPDATE_INETSK` (criu#2841): not implemented, its slot stays NULL.
    pub const UPDATE_INETSK: usize = 15;
}

/// Stages passed to `init`/`exit` (`CR_PLUGIN_STAGE__*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// `criu dump`.
    Dump,
    /// `criu pre-dump`.
    PreDump,
    /// `criu restore`.
    Restore,
}

impl Stage {
    /// The stage for CRIU's number, `None` for unknown numbers.
    pub fn from_raw(stage: c_int) -> Option<Stage> {
        match stage {
            0 => Some(Stage::Dump),
            1 => Some(Stage::PreDump),
            2 => Some(Stage::Restore),
            _ => None,
        }
    }
}

/// How [`HostProfile::max_hooks`] was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileBasis {
    /// `AMDGPU_PLUGIN_MAX_HOOKS`.
    Override,
    /// The size of CRIU's hook table: CRIU's own `CR_PLUGIN_HOOK__MAX`.
    HookTable {
        /// CRIU's maximum (may exceed ours).
        criu_max: u32,
    },
    /// A symbol that identifies the oldest possible CRIU release.
    Marker(&'static str),
    /// No CRIU in this process.
    NoCriu,
}

/// What the host CRIU offers, as far as the plugin's behaviour depends on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostProfile {
    /// The `max_hooks` written into the descriptor (10..=16).
    pub max_hooks: u32,
    /// How it was chosen.
    pub basis: ProfileBasis,
    /// A rejected `AMDGPU_PLUGIN_MAX_HOOKS` value, reported at `init`.
    pub rejected_override: Option<String>,
    /// An `AMDGPU_PLUGIN_MAX_HOOKS` above CRIU's maximum, lowered to it
    /// (the value asked for), reported at `init`.
    pub capped_override: Option<u32>,
}

impl HostProfile {
    /// Whether CRIU calls `DUMP_DEVICES_LATE` (else the dump unpauses early).
    pub fn has_dump_devices_late(&self) -> bool {
        self.max_hooks > hook::DUMP_DEVICES_LATE as u32
    }

    /// Whether CRIU calls `RESTORE_INIT`.
    pub fn has_restore_init(&self) -> bool {
        self.max_hooks > hook::RESTORE_INIT as u32
    }

    /// Whether CRIU calls `POST_FORKING`.
    pub fn has_post_forking(&self) -> bool {
        self.max_hooks > hook::POST_FORKING as u32
    }

    /// Whether CRIU passes `bool *retry_needed` to `RESTORE_EXT_FILE`.
    pub fn restore_ext_file_has_retry(&self) -> bool {
        self.has_restore_init()
    }
}

/// The smallest `max_hooks` the plugin accepts: CRIU v3.17, the first with
/// the device hooks 7..=9.
pub const MIN_MAX_HOOKS: u32 = 10;

/// Chooses the profile from what was observed: the override variable, the
/// byte size of CRIU's `cr_plugin_ctl` and which marker symbols exist.
pub fn choose_profile(
    override_var: Option<&str>,
    hook_table_size: Option<u64>,
    has_symbol: &dyn Fn(&str) -> bool,
) -> HostProfile {
    let list_head = 2 * std::mem::size_of::<*const c_void>() as u64;
    // One list head, then one per hook.
    let criu_max = hook_table_size
        .filter(|size| size % list_head == 0 && size / list_head > u64::from(MIN_MAX_HOOKS))
        .map(|size| u32::try_from(size / list_head - 1).unwrap_or(u32::MAX));
    let mut rejected_override = None;
    if let Some(value) = override_var {
        match value.trim().parse::<u32>() {
            Ok(n) if (MIN_MAX_HOOKS..=HOOK_SLOTS as u32).contains(&n) => {
                return match criu_max {
                    Some(max) if n > max => HostProfile {
                        max_hooks: max,
                        basis: ProfileBasis::HookTable { criu_max: max },
                        rejected_override: None,
                        capped_override: Some(n),
                    },
                    _ => HostProfile {
                        max_hooks: n,
                        basis: ProfileBasis::Override,
                        rejected_override: None,
                        capped_override: None,
                    },
                };
            }
            _ => rejected_override = Some(value.to_owned()),
        }
    }
    if let Some(criu_max) = criu_max {
        return HostProfile {
            max_hooks: criu_max.min(HOOK_SLOTS as u32),
            basis: ProfileBasis::HookTable { criu_max },
            rejected_override,
            capped_override: None,
        };
    }
    let (max_hooks, basis) = if has_symbol("check_and_remove_inventory_plugin") {
        (
            12,
            ProfileBasis::Marker("check_and_remove_inventory_plugin"),
        )
    } else if has_symbol("criu_get_image_dir") {
        (10, ProfileBasis::Marker("criu_get_image_dir"))
    } else {
        (HOOK_SLOTS as u32, ProfileBasis::NoCriu)
    };
    HostProfile {
        max_hooks,
        basis,
        rejected_override,
        capped_override: None,
    }
}

/// The host profile of this process, computed once (normally by the load-time
/// constructor).
pub fn host_profile() -> &'static HostProfile {
    static PROFILE: OnceLock<HostProfile> = OnceLock::new();
    PROFILE.get_or_init(|| {
        let override_var = std::env::var("AMDGPU_PLUGIN_MAX_HOOKS").ok();
        choose_profile(
            override_var.as_deref(),
            crate::criu::hook_table_size(),
            &|name| {
                CString::new(name)
                    .ok()
                    .and_then(|name| crate::criu::lookup(&name))
                    .is_some()
            },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_symbols(_: &str) -> bool {
        false
    }

    #[test]
    fn hook_table_size_gives_criu_max() {
        let head = 2 * std::mem::size_of::<*const c_void>() as u64;
        for (criu_max, expect) in [(10, 10), (12, 12), (13, 13), (15, 15), (16, 16), (17, 16)] {
            let p = choose_profile(None, Some(head * (criu_max + 1)), &no_symbols);
            assert_eq!(p.max_hooks, expect);
            assert_eq!(
                p.basis,
                ProfileBasis::HookTable {
                    criu_max: criu_max as u32
                }
            );
        }
    }

    #[test]
    fn override_wins_and_bad_override_is_reported() {
        let p = choose_profile(Some("13"), Some(1000), &no_symbols);
        assert_eq!((p.max_hooks, p.basis), (13, ProfileBasis::Override));
        let p = choose_profile(Some("17"), None, &|s| s == "criu_get_image_dir");
        assert_eq!(p.max_hooks, 10);
        assert_eq!(p.rejected_override.as_deref(), Some("17"));
        let p = choose_profile(Some("nine"), None, &no_symbols);
        assert_eq!(p.rejected_override.as_deref(), Some("nine"));
        assert_eq!(p.basis, ProfileBasis::NoCriu);
    }

    #[test]
    fn markers_are_the_fallback_and_never_overestimate() {
        let p = choose_profile(None, Some(7), &|s| {
            s == "criu_get_image_dir" || s == "check_and_remove_inventory_plugin"
        });
        assert_eq!(p.max_hooks, 12);
        let p = choose_profile(None, None, &|s| s == "criu_get_image_dir");
        assert_eq!(p.max_hooks, 10);
        assert!(!p.has_post_forking() && !p.restore_ext_file_has_retry());
        let p = choose_profile(None, None, &no_symbols);
        assert_eq!((p.max_hooks, p.basis.clone()), (16, ProfileBasis::NoCriu));
        assert!(p.has_dump_devices_late() && p.restore_ext_file_has_retry());
    }

    #[test]
    fn an_override_above_criu_is_capped_at_its_hook_table() {
        let head = 2 * std::mem::size_of::<*const c_void>() as u64;
        // CRIU 4.1.1 has 12 hooks: forcing 15 would make it refuse the plugin.
        let p = choose_profile(Some("15"), Some(head * 13), &no_symbols);
        assert_eq!(p.max_hooks, 12);
        assert_eq!(p.capped_override, Some(15));
        assert_eq!(p.basis, ProfileBasis::HookTable { criu_max: 12 });
        // At or below CRIU's maximum the override is taken.
        let p = choose_profile(Some("11"), Some(head * 13), &no_symbols);
        assert_eq!(
            (p.max_hooks, p.basis, p.capped_override),
            (11, ProfileBasis::Override, None)
        );
        // Without the table nothing says what CRIU accepts.
        let p = choose_profile(Some("16"), None, &|s| s == "criu_get_image_dir");
        assert_eq!((p.max_hooks, p.basis), (16, ProfileBasis::Override));
    }

    #[test]
    fn retry_argument_follows_restore_init() {
        let at = |n: &str| choose_profile(Some(n), None, &no_symbols);
        assert!(!at("13").restore_ext_file_has_retry());
        assert!(at("14").restore_ext_file_has_retry());
        assert!(!at("14").has_dump_devices_late());
        assert!(at("13").has_post_forking() && !at("12").has_post_forking());
    }
}
