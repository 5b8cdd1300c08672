//! An emulated CRIU image streamer (`criu-image-streamer`, CRIU's
//! `--stream`): every image file travels through a pipe, as
//! `img_streamer_open` hands the plugin one per file (here a connected
//! socket pair: like a pipe it cannot seek and reports no size).
//!
//! Capture (dump): each file opened for writing is a new pipe whose other
//! end a capture thread drains into memory; a file name may be captured
//! once. Serve (restore): each file opened for reading is a new pipe fed by
//! a thread, and is served **once** (the streamer drops a file from memory
//! when it hands it out), so a plugin that reads a file twice, or seeks,
//! fails here as it would under the real streamer. A file the capture does
//! not hold answers `ENOENT`, as CRIU's `img_streamer_open` does.
//!
//! Test support only; it never touches the images
//! directory except in [`ImageStreamer::extract`].

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use amdgpu_image::StreamMode;

/// Whether a streamer takes files in or hands them out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Capture,
    Serve,
}

type Capturing = JoinHandle<io::Result<(String, Vec<u8>)>>;

#[derive(Debug)]
struct State {
    role: Role,
    /// Captured files, or the files still to serve.
    files: BTreeMap<String, Vec<u8>>,
    /// File names in the order they were opened.
    opened: Vec<String>,
    capturing: Vec<Capturing>,
    serving: Vec<JoinHandle<()>>,
}

/// The emulated streamer; clones share one streamer.
#[derive(Debug, Clone)]
pub struct ImageStreamer {
    state: Arc<Mutex<State>>,
}

impl ImageStreamer {
    /// A streamer capturing a dump (`criu-image-streamer capture`).
    pub fn capture() -> Self {
        Self::with(Role::Capture, BTreeMap::new())
    }

    fn with(role: Role, files: BTreeMap<String, Vec<u8>>) -> Self {
        ImageStreamer {
            state: Arc::new(Mutex::new(State {
                role,
                files,
                opened: Vec::new(),
                capturing: Vec::new(),
                serving: Vec::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new streamer serving what this one captured (`criu-image-streamer
    /// serve` over the captured stream); call after [`Self::finish`].
    pub fn serve(&self) -> Self {
        Self::with(Role::Serve, self.lock().files.clone())
    }

    /// `img_streamer_open(name, mode)`: the plugin's end of a new pipe.
    pub fn open(&self, name: &str, mode: StreamMode) -> io::Result<File> {
        let mut state = self.lock();
        match (state.role, mode) {
            (Role::Capture, StreamMode::Dump) => {
                if state.files.contains_key(name) || state.opened.iter().any(|n| n == name) {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("the stream already holds {name}"),
                    ));
                }
                let (mut reader, writer) = UnixStream::pair()?;
                let owned = name.to_owned();
                let drain = std::thread::Builder::new()
                    .name("streamer-capture".into())
                    .spawn(move || {
                        let mut bytes = Vec::new();
                        reader.read_to_end(&mut bytes)?;
                        Ok((owned, bytes))
                    })?;
                state.opened.push(name.to_owned());
                state.capturing.push(drain);
                Ok(File::from(OwnedFd::from(writer)))
            }
            (Role::Serve, StreamMode::Restore) => {
                let Some(bytes) = state.files.remove(name) else {
                    return Err(io::Error::from_raw_os_error(libc::ENOENT));
                };
                let (reader, mut writer) = UnixStream::pair()?;
                let feed = std::thread::Builder::new()
                    .name("streamer-serve".into())
                    .spawn(move || {
                        // A reader that stops early closes its end: EPIPE
                        // (SIGPIPE is ignored in Rust programs) ends the feed.
                        let _ = writer.write_all(&bytes);
                    })?;
                state.opened.push(name.to_owned());
                state.serving.push(feed);
                Ok(File::from(OwnedFd::from(reader)))
            }
            (role, mode) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("the streamer is in {role:?} mode: {name} cannot be opened for {mode:?}"),
            )),
        }
    }

    /// Waits for every pipe to be drained or fed (`img_streamer_finish`);
    /// captured files become part of the stream. The first capture error
    /// is returned after all threads ended.
    pub fn finish(&self) -> io::Result<()> {
        let (capturing, serving) = {
            let mut state = self.lock();
            (
                std::mem::take(&mut state.capturing),
                std::mem::take(&mut state.serving),
            )
        };
        let mut result = Ok(());
        for drain in capturing {
            match drain.join() {
                Ok(Ok((name, bytes))) => {
                    self.lock().files.insert(name, bytes);
                }
                Ok(Err(e)) => result = result.and(Err(e)),
                Err(_) => result = result.and(Err(io::Error::other("a capture thread panicked"))),
            }
        }
        for feed in serving {
            if feed.join().is_err() {
                result = result.and(Err(io::Error::other("a serving thread panicked")));
            }
        }
        result
    }

    /// The file names opened so far, in order (captured, or served).
    pub fn opened(&self) -> Vec<String> {
        self.lock().opened.clone()
    }

    /// The captured files (or those not served yet) and their sizes.
    pub fn files(&self) -> BTreeMap<String, usize> {
        self.lock()
            .files
            .iter()
            .map(|(n, b)| (n.clone(), b.len()))
            .collect()
    }

    /// Writes the captured files into `dir` (`criu-image-streamer
    /// extract`), for `verify` and `show`.
    pub fn extract(&self, dir: &Path) -> io::Result<()> {
        for (name, bytes) in &self.lock().files {
            std::fs::write(dir.join(name), bytes)?;
        }
        Ok(())
    }
}
