//! A KFD file's BO contents: the image prepared while the process is paused
//! is finished by copying the contents into pages files (on the dumper's
//! thread, or on one of its own that the dump's end waits for), attaching
//! checksums, chunk digests and chunk sources to its BO entries, and
//! writing `amdgpu-kfd-<id>.img`.

use std::sync::Arc;

use ::kfd::Driver;
use amdgpu_image::{CriuKfd, ImageName, ImageStore, KfdBoEntry};

use super::Dumper;
use crate::error::Error;
use crate::incremental::ChunkPlan;
use crate::transfer;

/// A KFD file's contents being copied on a thread of their own.
pub(super) struct Transfer {
    pub(super) id: u32,
    pub(super) pid: u32,
    pub(super) worker: std::thread::JoinHandle<Result<Copied, Error>>,
}

/// Bytes of BO contents a finished transfer moved and stored.
#[derive(Debug, Clone, Copy)]
pub(super) struct Copied {
    pub(super) bytes: u64,
    pub(super) stored: u64,
}

/// A KFD file's image, all but its BO contents: made while the process is
/// paused; [`finish_kfd`] copies the contents and writes the image (on the
/// dumper's thread, or on one of its own).
pub(super) struct PreparedKfd {
    pub(super) id: u32,
    /// The message, its BO entries still without checksums and digests.
    pub(super) msg: CriuKfd,
    pub(super) gpus: Vec<transfer::GpuTarget>,
    pub(super) bos: Vec<kfd::CheckpointBo>,
    pub(super) plan: Arc<ChunkPlan>,
}

impl PreparedKfd {
    /// Bytes of BO contents the transfer moves.
    pub(super) fn content_bytes(&self) -> u64 {
        transfer::content_bytes(&self.gpus, &self.bos)
    }
}

impl<D: Driver + Clone> Dumper<D> {
    /// Waits for the KFD files whose contents are copying in the background
    /// ([`dump_kfd_background`](Self::dump_kfd_background)); the first
    /// failure, every one logged with its file.
    pub(super) fn finish_transfers(&mut self) -> Result<(), Error> {
        let mut first_error = None;
        for transfer in std::mem::take(&mut self.transfers) {
            let (id, pid) = (transfer.id, transfer.pid);
            let result = transfer
                .worker
                .join()
                .unwrap_or(Err(Error::TransferPanicked { id }));
            match result {
                Ok(copied) => log::info!(
                    "file {id}: pid {pid}: {} content bytes copied, {} stored",
                    copied.bytes,
                    copied.stored
                ),
                Err(e) => {
                    log::error!("file {id}: pid {pid}: contents not copied: {e}");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Stops the background transfers at their next staging buffer: the
    /// dump failed elsewhere, and [`unpause_all`](Self::unpause_all) then
    /// need not wait for copies nobody keeps.
    pub fn abandon(&mut self) {
        if !self.transfers.is_empty() {
            log::info!(
                "the dump failed: stopping {} background transfer(s)",
                self.transfers.len()
            );
            self.staging.stop();
        }
    }
}

/// Copies a prepared KFD file's BO contents into its pages files, fills
/// in its checksums, digests and chunk sources, and writes its image.
pub(super) fn finish_kfd<D: Driver + Clone, S: ImageStore + Sync>(
    prepared: PreparedKfd,
    driver: &D,
    store: &S,
    options: &crate::options::Options,
    pool: &transfer::StagingPool,
) -> Result<Copied, Error> {
    let PreparedKfd {
        id,
        mut msg,
        gpus,
        bos,
        plan,
    } = prepared;
    let contents = transfer::dump_contents(
        driver,
        store,
        id,
        &gpus,
        &bos,
        options,
        Some(&plan),
        Some(pool),
    )?;
    let references_parent = attach_contents(&mut msg.bo_entries, &contents)?;
    crate::incremental::log_written(
        &format!("file {id}"),
        contents.stored_bytes,
        contents.bytes,
        references_parent,
    );
    if references_parent {
        msg.parent_dump_id = plan.parent_dump_id().map(<[u8]>::to_vec);
    }
    store
        .write_message(&ImageName::Kfd { id }, &msg)
        .map_err(Error::image("writing the KFD image"))?;
    Ok(Copied {
        bytes: contents.bytes,
        stored: contents.stored_bytes,
    })
}

/// Fills the BO entries' checksums, chunk digests and chunk sources from
/// what the transfer reported; whether a chunk is referenced from the
/// parent. An entry the image does not have, or one reported twice, is an
/// error: the transfer and the image disagree, and an image written
/// anyway would restore some BO without its checksum (or with another's).
fn attach_contents(
    entries: &mut [KfdBoEntry],
    contents: &transfer::ContentReport,
) -> Result<bool, Error> {
    let count = entries.len();
    let mismatch = |what: &'static str, entry: usize, twice: bool| Error::ContentsMismatch {
        what,
        entry,
        twice,
        count,
    };
    let mut seen = vec![[false; 3]; count];
    let mut entry_of = |entry: usize, list: usize, name: &'static str| {
        let Some(bo_seen) = seen.get_mut(entry) else {
            return Err(mismatch(name, entry, false));
        };
        if std::mem::replace(&mut bo_seen[list], true) {
            return Err(mismatch(name, entry, true));
        }
        Ok(entry)
    };
    for (entry, checksum) in &contents.checksums {
        let entry = entry_of(*entry, 0, "a checksum")?;
        entries[entry].content_checksum = Some(*checksum);
    }
    for (entry, digests) in &contents.digests {
        let entry = entry_of(*entry, 1, "chunk digests")?;
        entries[entry].chunk_digests = Some(amdgpu_image::chunks::encode_digests(digests));
    }
    let mut references_parent = false;
    for (entry, sources) in &contents.sources {
        let entry = entry_of(*entry, 2, "chunk sources")?;
        if sources
            .iter()
            .any(|s| *s != amdgpu_image::ChunkSource::Here)
        {
            references_parent |= sources.contains(&amdgpu_image::ChunkSource::Parent);
            entries[entry].chunk_sources = Some(sources.iter().map(|s| *s as u8).collect());
        }
    }
    Ok(references_parent)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::dump) fn report(entries: &[usize]) -> transfer::ContentReport {
        transfer::ContentReport {
            checksums: entries.iter().map(|&e| (e, 0x1234 + e as u64)).collect(),
            digests: entries.iter().map(|&e| (e, vec![e as u128])).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn contents_are_attached_to_their_entries_and_a_stray_entry_is_an_error() {
        let mut entries = vec![KfdBoEntry::default(); 3];
        assert_eq!(
            attach_contents(&mut entries, &report(&[0, 2])).ok(),
            Some(false)
        );
        assert_eq!(entries[0].content_checksum, Some(0x1234));
        assert_eq!(entries[1].content_checksum, None);
        assert_eq!(entries[2].content_checksum, Some(0x1236));
        assert!(entries[2].chunk_digests.is_some());
        // An entry the image does not have: the transfer and the image
        // disagree, and the image must not be written as if they did not.
        let mut entries = vec![KfdBoEntry::default(); 3];
        let err = attach_contents(&mut entries, &report(&[0, 3])).unwrap_err();
        assert!(
            matches!(
                err,
                Error::ContentsMismatch {
                    what: "a checksum",
                    entry: 3,
                    twice: false,
                    count: 3,
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "the BO contents and the image disagree: a checksum of bo entry 3 (the image has 3 \
             bo entries)"
        );
        // The same entry twice.
        let err = attach_contents(&mut entries, &report(&[1, 1])).unwrap_err();
        assert!(
            matches!(
                err,
                Error::ContentsMismatch {
                    entry: 1,
                    twice: true,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("bo entry 1 twice"), "{err}");
    }
}
