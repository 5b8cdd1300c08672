//! hsakmt's (ROCt's) shared-memory object in `/dev/shm`: its size and
//! magic go into the KFD image, so restore can recreate it.

use std::path::Path;

/// The hsakmt (ROCt) shared-memory object, as `/dev/shm` names it.
pub const HSAKMT_SHM: &str = "hsakmt_shared_mem";

/// Size and first four bytes of hsakmt's shared memory, `(0, 0)` when absent
/// or of a size no image may record (said in the log): restore then leaves
/// the object to the machine's own ROCm processes, as for a dump without it.
pub(super) fn probe_hsakmt_shm(shm_dir: &Path) -> (u64, u32) {
    let path = shm_dir.join(HSAKMT_SHM);
    let Ok(meta) = std::fs::metadata(&path) else {
        return (0, 0);
    };
    if !(4..=amdgpu_image::validate::MAX_SHARED_MEM_SIZE).contains(&meta.len()) {
        log::warn!(
            "{} holds {} bytes, not hsakmt's shared table (4 to {} bytes): not recorded",
            path.display(),
            meta.len(),
            amdgpu_image::validate::MAX_SHARED_MEM_SIZE
        );
        return (0, 0);
    }
    let mut magic = [0u8; 4];
    match std::fs::File::open(&path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
    {
        Ok(()) => (meta.len(), u32::from_ne_bytes(magic)),
        Err(e) => {
            log::warn!("cannot read the magic of {}: {e}", path.display());
            (meta.len(), 0)
        }
    }
}
