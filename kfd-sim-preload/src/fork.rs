//! The machine across the process's own `fork(2)`: `pthread_atfork`
//! handlers, registered when the machine is built ([`register`], given how
//! to take the machine's locks).
//!
//! A forked child holds a copy of the parent's memory, the machine
//! included, but only the thread that forked. Any other thread, the
//! process's own (a runtime thread in an ioctl) or the simulator's (queue
//! engines, the doorbell watcher, SDMA workers), may hold one of the
//! machine's locks at that moment; in the child nobody would ever release
//! it, and the child's first call into the machine would wait for good.
//! So the prepare handler takes every lock of the machine
//! ([`Machine::hold_for_fork`], which ends with the simulator's,
//! [`kfd_sim::Sim::hold_for_fork`]) and of the shared-memory redirection,
//! waiting for the calls in progress to end; the fork then copies them
//! held by the forking thread, and both the parent and the child handler
//! release them. The child then becomes a simulated process of its own on
//! its first device call ([`Machine::driver`]).
//!
//! `posix_spawn` and `vfork` run no fork handlers and need none: their
//! child runs no code of this library before it execs.
//!
//! This module never calls into the machine and knows nothing of it: it
//! holds what the function the machine registered takes.

use std::any::Any;
use std::cell::RefCell;
use std::sync::{Once, OnceLock};

/// Locks taken for a fork, released when dropped; never looked into.
pub(crate) type Locks = Box<dyn Any>;

/// Takes the machine's locks, waiting for the calls in progress to end;
/// `None` while there is no machine.
pub(crate) type TakeLocks = fn() -> Option<Locks>;

/// How [`prepare`] takes the machine's locks, set by [`register`].
static TAKE_MACHINE: OnceLock<TakeLocks> = OnceLock::new();

/// The locks the prepare handler took, held across the fork.
struct Held {
    _machine: Locks,
    _shm: crate::shm::ShmHold,
}

thread_local! {
    /// Set by [`prepare`], taken by [`parent`] and [`child`]: the three run
    /// on the forking thread (in the child, its only thread).
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

extern "C" fn prepare() {
    if let Some(machine) = TAKE_MACHINE.get().and_then(|take| take()) {
        let held = Held {
            _machine: machine,
            _shm: crate::shm::hold(),
        };
        HELD.with(|h| *h.borrow_mut() = Some(held));
    }
}

/// Releases what [`prepare`] took; the same in the parent and the child.
extern "C" fn release() {
    HELD.with(|h| drop(h.borrow_mut().take()));
}

/// Registers the handlers, once per process (a forked child inherits
/// them); `take_machine` takes the machine's locks
/// ([`Machine::hold_for_fork`](crate::machine::Machine::hold_for_fork)).
pub(crate) fn register(take_machine: TakeLocks) {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        let _ = TAKE_MACHINE.set(take_machine);
        // SAFETY: the handlers are `extern "C"` functions without
        // arguments that never unwind (they take and drop lock guards,
        // which do not panic on poisoned locks here), as pthread_atfork
        // requires; they stay valid for the life of the process (this
        // library is never unloaded: LD_PRELOAD).
        let ret = unsafe { libc::pthread_atfork(Some(prepare), Some(release), Some(release)) };
        if ret != 0 {
            eprintln!(
                "kfd-sim-preload: pthread_atfork failed ({}): a child forked while another \
                 thread is in the simulated machine may find it locked",
                std::io::Error::from_raw_os_error(ret)
            );
        }
    });
}
