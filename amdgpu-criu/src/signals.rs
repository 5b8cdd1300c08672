//! `SIGINT`, `SIGTERM` and `SIGHUP` taken from their default action and
//! delivered as messages: [`block`] blocks them in the calling thread,
//! which must be the main thread before any other thread exists (threads
//! inherit the mask; the processes it starts do not, std resets the mask),
//! and a thread takes them with `sigwait` and sends each to the returned
//! channel. So every command that owns something (`sim`'s served machine,
//! CRIU run and plugin directory, the demo's temporary directories)
//! removes it on Ctrl-C.

#![allow(unsafe_code)]

use std::sync::mpsc::{self, Receiver, Sender};

/// The signals taken.
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before
    // sigaddset reads it; both only write into `set`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks the signals (see the module docs) and starts the thread that
/// takes them; each one taken arrives on the channel, also copied to
/// `also` when given.
pub fn block(also: Option<Sender<i32>>) -> Result<Receiver<i32>, String> {
    let set = signal_set();
    // SAFETY: `set` is an initialised signal set; the old mask is not
    // asked for (null).
    let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if ret != 0 {
        return Err(format!(
            "cannot block SIGINT, SIGTERM and SIGHUP: {}",
            std::io::Error::from_raw_os_error(ret)
        ));
    }
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("sim-signals".into())
        .spawn(move || loop {
            let mut signal: libc::c_int = 0;
            // SAFETY: `set` is initialised and outlives the call; sigwait
            // writes the signal taken into `signal`.
            if unsafe { libc::sigwait(&set, &mut signal) } != 0 {
                continue;
            }
            if let Some(also) = &also {
                let _ = also.send(signal);
            }
            if tx.send(signal).is_err() && also.is_none() {
                return;
            }
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    Ok(rx)
}

/// The signal's name.
pub fn name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}
