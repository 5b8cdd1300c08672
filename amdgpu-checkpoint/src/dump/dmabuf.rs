//! Dma-buf files: the share handle that names a buffer across files and
//! processes (the dma-buf's file identity), and `amdgpu-dmabuf_<id>.img`
//! recording it. A dma-buf offered before the file of its BO waits for it.

use std::os::fd::{AsFd, BorrowedFd};

use ::kfd::{Driver, Kfd};
use amdgpu_image::{CriuDmabufNode, ImageName, ImageStore, FORMAT_VERSION, PRODUCER};

use super::{DmabufDump, Dumper};
use crate::error::Error;

impl<D: Driver + Clone> Dumper<D> {
    /// The handle of the buffer behind a dma-buf: dma-bufs of one buffer are
    /// one file (the kernel caches a GEM object's export), so the file's
    /// identity names the buffer.
    pub(super) fn dmabuf_handle(&mut self, dmabuf: BorrowedFd<'_>) -> Result<u32, Error> {
        let key = file_identity(dmabuf)?;
        let next = self.dmabuf_handles.len() as u32 + 1;
        Ok(*self.dmabuf_handles.entry(key).or_insert(next))
    }

    /// Dumps a dma-buf fd as CRIU file `id`: `Ok(None)` when amdgpu did not
    /// export it (not ours). A dma-buf of a KFD BO is recorded as the BO's
    /// handle (`amdgpu-dmabuf_<id>.img`); when CRIU offers it before the KFD
    /// file, it waits for it like a render node.
    pub fn dump_dmabuf<S: ImageStore>(
        &mut self,
        store: &S,
        fd: BorrowedFd<'_>,
        id: u32,
    ) -> Result<Option<DmabufDump>, Error> {
        let kfd = Kfd::open(self.driver.clone()).map_err(Error::kfd(
            "opening a private /dev/kfd to identify a dma-buf",
        ))?;
        match kfd.dmabuf_info(fd) {
            Ok(_) => {}
            // Another exporter's dma-buf (or not one the KFD knows): not ours.
            Err(e) if matches!(e.errno(), libc::EINVAL | libc::EBADF) => return Ok(None),
            Err(e) => {
                return Err(Error::Kfd {
                    step: "identifying a dma-buf (GET_DMABUF_INFO)",
                    source: e,
                })
            }
        }
        let key = file_identity(fd)?;
        if let Some(&handle) = self.dmabuf_handles.get(&key) {
            write_dmabuf(store, id, handle)?;
            return Ok(Some(DmabufDump {
                id,
                handle: Some(handle),
            }));
        }
        let own = fd
            .try_clone_to_owned()
            .map_err(Error::io("duplicating the dma-buf fd"))?;
        log::info!("file {id}: dma-buf comes before the KFD file of its BO; written after it");
        self.pending_dmabufs.push((own, id));
        Ok(Some(DmabufDump { id, handle: None }))
    }

    pub(super) fn flush_pending_dmabufs<S: ImageStore>(&mut self, store: &S) -> Result<(), Error> {
        let pending = std::mem::take(&mut self.pending_dmabufs);
        for (fd, id) in pending {
            let key = file_identity(fd.as_fd())?;
            match self.dmabuf_handles.get(&key) {
                Some(&handle) => {
                    write_dmabuf(store, id, handle)?;
                    log::info!("file {id}: dma-buf of BO handle {handle} dumped");
                }
                None => self.pending_dmabufs.push((fd, id)),
            }
        }
        Ok(())
    }
}

/// `(st_dev, st_ino)` of an open file.
fn file_identity(fd: BorrowedFd<'_>) -> Result<(u64, u64), Error> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::File::from(
        fd.try_clone_to_owned()
            .map_err(Error::io("duplicating a dma-buf fd"))?,
    );
    let meta = file.metadata().map_err(Error::io("fstat of a dma-buf"))?;
    Ok((meta.dev(), meta.ino()))
}

fn write_dmabuf<S: ImageStore>(store: &S, id: u32, handle: u32) -> Result<(), Error> {
    let msg = CriuDmabufNode {
        gem_handle: handle,
        producer: Some(PRODUCER.to_owned()),
        format_version: Some(FORMAT_VERSION),
        message_checksum: None,
    };
    store
        .write_message(&ImageName::Dmabuf { id }, &msg)
        .map_err(Error::image("writing the dma-buf image"))
}
