//! Golden images produced by Python's protobuf package (an encoder entirely
//! independent of ours) from the proto2 schema built at run time. Skipped, with
//! a message, when `python3` or its `google.protobuf` module is missing.

use std::process::Command;

use amdgpu_image::{decode_message, encode_message, CriuDmabufNode, CriuKfd, CriuRenderNode};

const SCRIPT: &str = r#"
import sys
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
fdp = descriptor_pb2.FileDescriptorProto(name="criu-amdgpu.proto", syntax="proto2")

def msg(name, fields):
    m = fdp.message_type.add(name=name)
    for num, fname, typ, label, sub in fields:
        f = m.field.add(name=fname, number=num, type=typ, label=label)
        if sub:
            f.type_name = "." + sub

R, O, REP = F.LABEL_REQUIRED, F.LABEL_OPTIONAL, F.LABEL_REPEATED
U32, U64, MSG, BYTES, STR, FX64 = F.TYPE_UINT32, F.TYPE_UINT64, F.TYPE_MESSAGE, F.TYPE_BYTES, F.TYPE_STRING, F.TYPE_FIXED64

msg("dev_iolink", [(1, "type", U32, R, None), (2, "node_to_id", U32, R, None)])
dev_names = ["node_id", "gpu_id", "cpu_cores_count", "simd_count", "mem_banks_count", "caches_count",
    "io_links_count", "max_waves_per_simd", "lds_size_in_kb", "gds_size_in_kb", "num_gws",
    "wave_front_size", "array_count", "simd_arrays_per_engine", "cu_per_simd_array", "simd_per_cu",
    "max_slots_scratch_cu", "vendor_id", "device_id", "domain", "drm_render_minor", "hive_id",
    "num_sdma_engines", "num_sdma_xgmi_engines", "num_sdma_queues_per_engine", "num_cp_queues",
    "fw_version", "capability", "sdma_fw_version", "vram_public", "vram_size"]
msg("kfd_device_entry", [(i + 1, n, U64 if n in ("hive_id", "vram_size") else U32, R, None)
    for i, n in enumerate(dev_names)] + [(32, "iolinks", MSG, REP, "dev_iolink")])
msg("kfd_bo_entry", [(1, "addr", U64, R, None), (2, "size", U64, R, None), (3, "offset", U64, R, None),
    (4, "alloc_flags", U32, R, None), (5, "gpu_id", U32, R, None), (6, "handle", U32, R, None),
    (100, "content_checksum", FX64, O, None)])
msg("criu_kfd", [(1, "pid", U32, R, None), (2, "num_of_gpus", U32, R, None), (3, "num_of_cpus", U32, R, None),
    (4, "device_entries", MSG, REP, "kfd_device_entry"), (5, "num_of_bos", U64, R, None),
    (6, "bo_entries", MSG, REP, "kfd_bo_entry"), (7, "num_of_objects", U32, R, None),
    (8, "shared_mem_size", U64, R, None), (9, "shared_mem_magic", U32, R, None),
    (10, "priv_data", BYTES, R, None), (100, "producer", STR, O, None), (101, "format_version", U32, O, None)])
msg("drm_vm_entry", [(1, "addr", U64, R, None), (2, "size", U64, R, None), (3, "offset", U64, R, None),
    (4, "flags", U64, R, None)])
msg("drm_bo_entry", [(1, "addr", U64, R, None), (2, "size", U64, R, None), (3, "offset", U64, R, None),
    (4, "alloc_flags", U64, R, None), (5, "alignment", U64, R, None), (6, "preferred_domains", U32, R, None),
    (7, "handle", U32, R, None), (8, "is_import", U32, R, None), (9, "num_of_vms", U32, R, None),
    (10, "vm_entries", MSG, REP, "drm_vm_entry"), (100, "content_checksum", FX64, O, None)])
msg("criu_render_node", [(1, "gpu_id", U32, R, None), (2, "id", U32, R, None),
    (3, "drm_render_minor", U32, R, None), (4, "num_of_bos", U64, R, None),
    (5, "bo_entries", MSG, REP, "drm_bo_entry"), (100, "producer", STR, O, None),
    (101, "format_version", U32, O, None)])
msg("criu_dmabuf_node", [(1, "gem_handle", U32, R, None), (100, "producer", STR, O, None),
    (101, "format_version", U32, O, None)])

pool = descriptor_pool.DescriptorPool()
pool.Add(fdp)
# GetMessageClass since protobuf 4.22; older ones (Debian 12's 3.21) have
# the factory's GetPrototype.
_factory = getattr(message_factory, "GetMessageClass", None) or message_factory.MessageFactory(pool).GetPrototype
cls = lambda n: _factory(pool.FindMessageTypeByName(n))

def dev(**kw):
    d = {n: 0 for n in dev_names}
    d.update(kw)
    return d

kfd = cls("criu_kfd")(pid=77, num_of_gpus=2, num_of_cpus=1, num_of_bos=3, num_of_objects=5,
    shared_mem_size=4096, shared_mem_magic=0xcafe, priv_data=bytes(range(40)),
    producer="amdgpu-criu-rs 0.1.0", format_version=1)
kfd.device_entries.add(**dev(node_id=0, cpu_cores_count=32)).iolinks.add(type=2, node_to_id=1)
for node, gpu, minor in ((1, 0x1111, 128), (2, 0xfffe, 129)):
    e = kfd.device_entries.add(**dev(node_id=node, gpu_id=gpu, simd_count=304, drm_render_minor=minor,
        hive_id=0xfedc_ba98_7654_3210, vram_size=192 << 30, vram_public=1, vendor_id=0x1002, device_id=0x74a1))
    e.iolinks.add(type=11, node_to_id=3 - node)
kfd.bo_entries.add(addr=1 << 47, size=1 << 21, offset=0, alloc_flags=0x80000001, gpu_id=0x1111, handle=0xffffffff,
    content_checksum=0xffffffffffffffff)
kfd.bo_entries.add(addr=4096, size=4096, offset=1 << 40, alloc_flags=2, gpu_id=0xfffe, handle=7)
kfd.bo_entries.add(addr=0, size=0, offset=0, alloc_flags=0, gpu_id=0, handle=0)

rn = cls("criu_render_node")(gpu_id=0x1111, id=12, drm_render_minor=128, num_of_bos=1)
bo = rn.bo_entries.add(addr=0x10000, size=65536, offset=0x1000, alloc_flags=1 << 63, alignment=65536,
    preferred_domains=4, handle=2, is_import=1, num_of_vms=2, content_checksum=5)
bo.vm_entries.add(addr=0x10000, size=4096, offset=0, flags=14)
bo.vm_entries.add(addr=0x20000, size=65536, offset=4096, flags=0)

db = cls("criu_dmabuf_node")(gem_handle=0)

for m in (kfd, rn, db):
    print(m.SerializeToString(deterministic=True).hex())
"#;

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn python_protobuf_images_decode_and_reencode_identically() {
    // The python3 on PATH (a pyenv or venv one may lack the module), else
    // the system's, where Debian's python3-protobuf installs it.
    let Some(python) = ["python3", "/usr/bin/python3"].into_iter().find(|python| {
        Command::new(python)
            .args(["-c", "import google.protobuf"])
            .output()
            .is_ok_and(|o| o.status.success())
    }) else {
        test_env::skip(
            "no python3 with the google.protobuf module (apt-get install python3-protobuf)",
        );
        return;
    };
    let out = Command::new(python).args(["-c", SCRIPT]).output().unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3);

    let kfd_bytes = unhex(lines[0]);
    let kfd: CriuKfd = decode_message("amdgpu-kfd-1.img", &kfd_bytes).unwrap();
    assert_eq!(
        (kfd.pid, kfd.num_of_gpus, kfd.num_of_cpus, kfd.num_of_bos),
        (77, 2, 1, 3)
    );
    assert_eq!(kfd.device_entries.len(), 3);
    assert_eq!(kfd.device_entries[0].cpu_cores_count, 32);
    assert_eq!(kfd.device_entries[2].gpu_id, 0xfffe);
    assert_eq!(kfd.device_entries[2].hive_id, 0xfedc_ba98_7654_3210);
    assert_eq!(kfd.device_entries[2].vram_size, 192 << 30);
    assert_eq!(kfd.device_entries[2].iolinks[0].r#type, 11);
    assert_eq!(kfd.bo_entries[0].handle, 0xffff_ffff);
    assert_eq!(kfd.bo_entries[0].content_checksum, Some(u64::MAX));
    assert_eq!(kfd.bo_entries[1].offset, 1 << 40);
    assert_eq!(kfd.bo_entries[1].content_checksum, None);
    assert_eq!(kfd.priv_data, (0..40).collect::<Vec<u8>>());
    assert_eq!(kfd.producer.as_deref(), Some("amdgpu-criu-rs 0.1.0"));
    assert_eq!(kfd.format_version, Some(1));
    assert_eq!(encode_message(&kfd), kfd_bytes);

    let rn_bytes = unhex(lines[1]);
    let rn: CriuRenderNode = decode_message("amdgpu-renderD-12.img", &rn_bytes).unwrap();
    assert_eq!(rn.bo_entries[0].alloc_flags, 1 << 63);
    assert_eq!(rn.bo_entries[0].vm_entries[1].offset, 4096);
    assert_eq!(rn.bo_entries[0].content_checksum, Some(5));
    assert_eq!(encode_message(&rn), rn_bytes);

    let db_bytes = unhex(lines[2]);
    let db: CriuDmabufNode = decode_message("amdgpu-dmabuf_3.img", &db_bytes).unwrap();
    assert_eq!(db.gem_handle, 0);
    assert_eq!(encode_message(&db), db_bytes);
}
