//! Golden images written byte by byte from the protobuf wire format, without
//! our encoder: they must decode to the expected values, and our encoding of
//! those values must be byte-identical (protobuf-c emits fields in tag order
//! and always emits required fields).

use std::io::{self, Read};

use amdgpu_image::{
    decode_message, encode_message, read_message, write_message, CriuDmabufNode, CriuKfd,
    CriuRenderNode, DevIolink, DrmBoEntry, DrmVmEntry, Error, KfdBoEntry, KfdDeviceEntry,
    ReadLimits,
};

/// A minimal, independent protobuf wire writer for the test.
#[derive(Default)]
struct Wire(Vec<u8>);

impl Wire {
    fn varint_raw(&mut self, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(b);
                return;
            }
            self.0.push(b | 0x80);
        }
    }
    fn key(&mut self, tag: u32, wire: u8) {
        self.varint_raw(u64::from(tag) << 3 | u64::from(wire));
    }
    fn uint(mut self, tag: u32, v: u64) -> Self {
        self.key(tag, 0);
        self.varint_raw(v);
        self
    }
    fn bytes(mut self, tag: u32, b: &[u8]) -> Self {
        self.key(tag, 2);
        self.varint_raw(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }
    fn fixed64(mut self, tag: u32, v: u64) -> Self {
        self.key(tag, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn msg(self, tag: u32, m: Wire) -> Self {
        self.bytes(tag, &m.0)
    }
}

#[test]
fn dmabuf_node_zero_handle_is_still_emitted() {
    let golden = [0x08, 0x00];
    let msg: CriuDmabufNode = decode_message("amdgpu-dmabuf_1.img", &golden).unwrap();
    assert_eq!(
        msg,
        CriuDmabufNode {
            gem_handle: 0,
            producer: None,
            format_version: None,
            message_checksum: None,
        }
    );
    assert_eq!(encode_message(&msg), golden);
}

#[test]
fn zero_kfd_emits_every_required_field() {
    // Tags 1, 2, 3, 5, 7, 8, 9 as varint 0 and tag 10 as an empty bytes field.
    let golden = [
        0x08, 0, 0x10, 0, 0x18, 0, 0x28, 0, 0x38, 0, 0x40, 0, 0x48, 0, 0x52, 0,
    ];
    assert_eq!(encode_message(&CriuKfd::default()), golden);
    let back: CriuKfd = decode_message("amdgpu-kfd-1.img", &golden).unwrap();
    assert_eq!(back, CriuKfd::default());
    assert_eq!(
        encode_message(&CriuRenderNode::default()),
        [0x08, 0, 0x10, 0, 0x18, 0, 0x20, 0]
    );
}

#[test]
fn iolink_and_bo_entry_by_hand() {
    let golden = [0x08, 0x01, 0x10, 0x02];
    let link = DevIolink {
        r#type: 1,
        node_to_id: 2,
    };
    assert_eq!(encode_message_nested(&link), golden);

    // addr 0x7f00_0000_0000, size 2 MiB, offset 0, flags VRAM|WRITABLE, gpu 0xc0de, handle -1
    let golden_bo: &[u8] = &[
        0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0xe0, 0x1f, // 1: addr
        0x10, 0x80, 0x80, 0x80, 0x01, // 2: size 2^21
        0x18, 0x00, // 3: offset 0
        0x20, 0x81, 0x80, 0x80, 0x80, 0x08, // 4: 0x8000_0001
        0x28, 0xde, 0x81, 0x03, // 5: 0xc0de
        0x30, 0xff, 0xff, 0xff, 0xff, 0x0f, // 6: 0xffff_ffff
    ];
    let bo = KfdBoEntry {
        addr: 0x7f00_0000_0000,
        size: 2 << 20,
        offset: 0,
        alloc_flags: 0x8000_0001,
        gpu_id: 0xc0de,
        handle: 0xffff_ffff,
        content_checksum: None,
        ..Default::default()
    };
    assert_eq!(encode_message_nested(&bo), golden_bo);
    assert_eq!(
        <KfdBoEntry as prost::Message>::decode(golden_bo).unwrap(),
        bo
    );
}

fn encode_message_nested<M: prost::Message>(m: &M) -> Vec<u8> {
    m.encode_to_vec()
}

fn device_wire(e: &KfdDeviceEntry) -> Wire {
    let scalars: [u64; 31] = [
        e.node_id.into(),
        e.gpu_id.into(),
        e.cpu_cores_count.into(),
        e.simd_count.into(),
        e.mem_banks_count.into(),
        e.caches_count.into(),
        e.io_links_count.into(),
        e.max_waves_per_simd.into(),
        e.lds_size_in_kb.into(),
        e.gds_size_in_kb.into(),
        e.num_gws.into(),
        e.wave_front_size.into(),
        e.array_count.into(),
        e.simd_arrays_per_engine.into(),
        e.cu_per_simd_array.into(),
        e.simd_per_cu.into(),
        e.max_slots_scratch_cu.into(),
        e.vendor_id.into(),
        e.device_id.into(),
        e.domain.into(),
        e.drm_render_minor.into(),
        e.hive_id,
        e.num_sdma_engines.into(),
        e.num_sdma_xgmi_engines.into(),
        e.num_sdma_queues_per_engine.into(),
        e.num_cp_queues.into(),
        e.fw_version.into(),
        e.capability.into(),
        e.sdma_fw_version.into(),
        e.vram_public.into(),
        e.vram_size,
    ];
    let mut w = Wire::default();
    for (i, v) in scalars.iter().enumerate() {
        w = w.uint(i as u32 + 1, *v);
    }
    for l in &e.iolinks {
        w = w.msg(
            32,
            Wire::default()
                .uint(1, l.r#type.into())
                .uint(2, l.node_to_id.into()),
        );
    }
    w
}

fn sample_kfd() -> CriuKfd {
    let cpu = KfdDeviceEntry {
        node_id: 0,
        cpu_cores_count: 16,
        iolinks: vec![DevIolink {
            r#type: 2,
            node_to_id: 1,
        }],
        ..Default::default()
    };
    let gpu = KfdDeviceEntry {
        node_id: 1,
        gpu_id: 0x8a3c,
        simd_count: 240,
        mem_banks_count: 1,
        caches_count: 205,
        io_links_count: 1,
        max_waves_per_simd: 8,
        lds_size_in_kb: 64,
        num_gws: 64,
        wave_front_size: 64,
        array_count: 16,
        simd_arrays_per_engine: 1,
        cu_per_simd_array: 15,
        simd_per_cu: 4,
        max_slots_scratch_cu: 32,
        vendor_id: 0x1002,
        device_id: 0x740f,
        domain: 0,
        drm_render_minor: 128,
        hive_id: 0x1234_5678_9abc_def0,
        num_sdma_engines: 2,
        num_sdma_xgmi_engines: 6,
        num_sdma_queues_per_engine: 8,
        num_cp_queues: 24,
        fw_version: 75,
        capability: 0x3a80_0000,
        sdma_fw_version: 20,
        vram_public: 1,
        vram_size: 64 << 30,
        iolinks: vec![DevIolink {
            r#type: 2,
            node_to_id: 0,
        }],
        ..Default::default()
    };
    let bos = vec![
        KfdBoEntry {
            addr: 0x7ff0_0000_0000,
            size: 4096,
            offset: 0x1000,
            alloc_flags: 1,
            gpu_id: 0x8a3c,
            handle: 3,
            content_checksum: None,
            ..Default::default()
        },
        KfdBoEntry {
            addr: 0x7ff0_0020_0000,
            size: 8192,
            offset: 0,
            alloc_flags: 8,
            gpu_id: 0x8a3c,
            handle: 0xffff_ffff,
            content_checksum: None,
            ..Default::default()
        },
    ];
    CriuKfd {
        pid: 4242,
        num_of_gpus: 1,
        num_of_cpus: 1,
        device_entries: vec![cpu, gpu],
        num_of_bos: 2,
        bo_entries: bos,
        num_of_objects: 3,
        shared_mem_size: 0,
        shared_mem_magic: 0,
        priv_data: vec![1, 2, 3, 0, 255],
        producer: None,
        format_version: None,
        kfd_major_version: None,
        kfd_minor_version: None,
        kfd_required_minor: None,
        message_checksum: None,
        ..Default::default()
    }
}

fn kfd_wire(k: &CriuKfd) -> Wire {
    let mut w = Wire::default()
        .uint(1, k.pid.into())
        .uint(2, k.num_of_gpus.into())
        .uint(3, k.num_of_cpus.into());
    for d in &k.device_entries {
        w = w.msg(4, device_wire(d));
    }
    w = w.uint(5, k.num_of_bos);
    for b in &k.bo_entries {
        let mut e = Wire::default()
            .uint(1, b.addr)
            .uint(2, b.size)
            .uint(3, b.offset)
            .uint(4, b.alloc_flags.into())
            .uint(5, b.gpu_id.into())
            .uint(6, b.handle.into());
        if let Some(c) = b.content_checksum {
            e = e.fixed64(100, c);
        }
        w = w.msg(6, e);
    }
    w = w
        .uint(7, k.num_of_objects.into())
        .uint(8, k.shared_mem_size)
        .uint(9, k.shared_mem_magic.into())
        .bytes(10, &k.priv_data);
    if let Some(p) = &k.producer {
        w = w.bytes(100, p.as_bytes());
    }
    if let Some(v) = k.format_version {
        w = w.uint(101, v.into());
    }
    w
}

#[test]
fn kfd_image_matches_hand_encoding() {
    let kfd = sample_kfd();
    let golden = kfd_wire(&kfd).0;
    let decoded: CriuKfd = decode_message("amdgpu-kfd-1.img", &golden).unwrap();
    assert_eq!(decoded, kfd);
    assert_eq!(encode_message(&kfd), golden);
}

#[test]
fn our_additions_sit_after_upstream_fields_with_high_tags() {
    let mut kfd = sample_kfd();
    kfd.mark_producer();
    kfd.bo_entries[0].content_checksum = Some(0x0123_4567_89ab_cdef);
    let golden = kfd_wire(&kfd).0;
    assert_eq!(encode_message(&kfd), golden);
    // tag 100, wire type 2 → key 802 → varint a2 06, right after priv_data.
    let producer_key = [0xa2, 0x06];
    let pos = golden.windows(2).rposition(|w| w == producer_key).unwrap();
    assert!(golden[pos + 3..].starts_with(b"amdgpu-criu-rs "));
    let decoded: CriuKfd = decode_message("amdgpu-kfd-1.img", &golden).unwrap();
    assert_eq!(decoded, kfd);
}

#[test]
fn unknown_fields_are_skipped() {
    let mut w = kfd_wire(&sample_kfd());
    w = w.uint(55, 7).bytes(300, b"future");
    let decoded: CriuKfd = decode_message("amdgpu-kfd-1.img", &w.0).unwrap();
    assert_eq!(decoded, sample_kfd());
}

#[test]
fn render_node_matches_hand_encoding() {
    let rn = CriuRenderNode {
        gpu_id: 0x8a3c,
        id: 9,
        drm_render_minor: 129,
        num_of_bos: 1,
        bo_entries: vec![DrmBoEntry {
            addr: 0x40_0000,
            size: 8192,
            offset: 0x10_0000,
            alloc_flags: 0,
            alignment: 4096,
            preferred_domains: 4,
            handle: 1,
            is_import: 0,
            num_of_vms: 1,
            vm_entries: vec![DrmVmEntry {
                addr: 0x40_0000,
                size: 8192,
                offset: 0,
                flags: 0xe,
            }],
            content_checksum: None,
            share_handle: None,
            ..Default::default()
        }],
        producer: None,
        format_version: None,
        message_checksum: None,
        device: None,
        kfd_pids: Vec::new(),
        ..Default::default()
    };
    let vm = Wire::default()
        .uint(1, 0x40_0000)
        .uint(2, 8192)
        .uint(3, 0)
        .uint(4, 0xe);
    let bo = Wire::default()
        .uint(1, 0x40_0000)
        .uint(2, 8192)
        .uint(3, 0x10_0000)
        .uint(4, 0)
        .uint(5, 4096)
        .uint(6, 4)
        .uint(7, 1)
        .uint(8, 0)
        .uint(9, 1)
        .msg(10, vm);
    let golden = Wire::default()
        .uint(1, 0x8a3c)
        .uint(2, 9)
        .uint(3, 129)
        .uint(4, 1)
        .msg(5, bo)
        .0;
    assert_eq!(
        decode_message::<CriuRenderNode>("amdgpu-renderD-9.img", &golden).unwrap(),
        rn
    );
    assert_eq!(encode_message(&rn), golden);
}

#[test]
fn missing_required_fields_are_errors_with_paths() {
    let err = decode_message::<CriuDmabufNode>("amdgpu-dmabuf_4.img", &[]).unwrap_err();
    assert!(matches!(err, Error::MissingField { .. }));
    assert_eq!(
        err.to_string(),
        "amdgpu-dmabuf_4.img: criu_dmabuf_node.gem_handle: required field missing"
    );

    // bo_entries[1] without size (tag 2).
    let kfd = sample_kfd();
    let mut w = Wire::default().uint(1, 1).uint(2, 1).uint(3, 1);
    for d in &kfd.device_entries {
        w = w.msg(4, device_wire(d));
    }
    w = w.uint(5, 2);
    w = w.msg(
        6,
        Wire::default()
            .uint(1, 0)
            .uint(2, 4096)
            .uint(3, 0)
            .uint(4, 1)
            .uint(5, 1)
            .uint(6, 0),
    );
    w = w.msg(
        6,
        Wire::default()
            .uint(1, 0)
            .uint(3, 0)
            .uint(4, 1)
            .uint(5, 1)
            .uint(6, 0),
    );
    w = w.uint(7, 0).uint(8, 0).uint(9, 0).bytes(10, b"");
    let err = decode_message::<CriuKfd>("amdgpu-kfd-5.img", &w.0).unwrap_err();
    assert_eq!(
        err.to_string(),
        "amdgpu-kfd-5.img: criu_kfd.bo_entries[1].size: required field missing"
    );

    // A device entry's iolink without node_to_id.
    let mut w = Wire::default().uint(1, 1).uint(2, 0).uint(3, 1);
    let mut dev = device_wire(&kfd.device_entries[0]);
    dev = dev.msg(32, Wire::default().uint(1, 2));
    w = w
        .msg(4, dev)
        .uint(5, 0)
        .uint(7, 0)
        .uint(8, 0)
        .uint(9, 0)
        .bytes(10, b"");
    let err = decode_message::<CriuKfd>("amdgpu-kfd-5.img", &w.0).unwrap_err();
    assert_eq!(
        err.to_string(),
        "amdgpu-kfd-5.img: criu_kfd.device_entries[0].iolinks[1].node_to_id: required field missing"
    );
}

#[test]
fn malformed_payloads_are_decode_errors() {
    for bad in [&[0x08][..], &[0x0a, 0x05, 0x01], &[0xff; 11], &[0x0b]] {
        let err = decode_message::<CriuKfd>("amdgpu-kfd-1.img", bad).unwrap_err();
        assert!(matches!(err, Error::Decode { .. }), "{bad:?}: {err}");
        // Named damaged, with what to do about it.
        let text = err.to_string();
        assert!(
            text.starts_with("amdgpu-kfd-1.img: damaged: its criu_kfd message does not decode (")
                && text.ends_with("or run `amdgpu-criu verify` on it to see every problem"),
            "{text}"
        );
    }
}

/// A reader that can only read, a few bytes at a time, like a pipe.
struct Pipe<'a>(&'a [u8]);

impl Read for Pipe<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.0.len()).min(3);
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

#[test]
fn framing_reads_from_a_pipe_and_checks_the_header() {
    let kfd = sample_kfd();
    let mut framed = Vec::new();
    let len = write_message(&mut framed, "amdgpu-kfd-1.img", &kfd).unwrap();
    assert_eq!(framed[..8], len.to_le_bytes());
    assert_eq!(framed.len() as u64, 8 + len);
    let back: CriuKfd =
        read_message(Pipe(&framed), "amdgpu-kfd-1.img", ReadLimits::default()).unwrap();
    assert_eq!(back, kfd);

    let mut trailing = framed.clone();
    trailing.push(0);
    let err =
        read_message::<_, CriuKfd>(Pipe(&trailing), "amdgpu-kfd-1.img", ReadLimits::default())
            .unwrap_err();
    assert!(matches!(err, Error::TrailingBytes { .. }), "{err}");

    let err = read_message::<_, CriuKfd>(
        Pipe(&framed[..20]),
        "amdgpu-kfd-1.img",
        ReadLimits::default(),
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::Truncated { expected, actual: 12, .. } if expected == len),
        "{err}"
    );

    let err = read_message::<_, CriuKfd>(
        Pipe(&framed[..5]),
        "amdgpu-kfd-1.img",
        ReadLimits::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("amdgpu-kfd-1.img: read length header: "),
        "{err}"
    );
}

#[test]
fn huge_length_headers_do_not_allocate() {
    // 2^60 bytes announced, 4 present: over the limit.
    let mut huge = (1u64 << 60).to_le_bytes().to_vec();
    huge.extend_from_slice(&[8, 0, 0, 0]);
    let err = read_message::<_, CriuKfd>(Pipe(&huge), "amdgpu-kfd-1.img", ReadLimits::default())
        .unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
    // Even with no limit, the buffer grows only with the bytes that arrive.
    let err = read_message::<_, CriuKfd>(
        Pipe(&huge),
        "amdgpu-kfd-1.img",
        ReadLimits {
            max_message_len: u64::MAX,
        },
    )
    .unwrap_err();
    assert!(matches!(err, Error::Truncated { actual: 4, .. }), "{err}");
}

/// A render-only image: gpu_id 0 and the GPU's device entry at tag 102,
/// after the upstream fields and our producer tags, encoded exactly as a
/// hand-written wire image. A reader that only knows upstream's schema
/// (tags 1-5, as the C plugin's) skips tag 102 and sees gpu_id 0.
#[test]
fn render_only_device_entry_is_tag_102() {
    let gpu = sample_kfd()
        .device_entries
        .into_iter()
        .find(KfdDeviceEntry::is_gpu)
        .expect("a gpu entry");
    let mut rn = CriuRenderNode {
        gpu_id: 0,
        id: 4,
        drm_render_minor: gpu.drm_render_minor,
        num_of_bos: 0,
        bo_entries: Vec::new(),
        producer: None,
        format_version: None,
        message_checksum: None,
        device: Some(gpu.clone()),
        kfd_pids: Vec::new(),
        ..Default::default()
    };
    rn.mark_producer();
    let upstream = Wire::default()
        .uint(1, 0)
        .uint(2, 4)
        .uint(3, gpu.drm_render_minor.into())
        .uint(4, 0);
    let golden = Wire(upstream.0.clone())
        .bytes(100, amdgpu_image::PRODUCER.as_bytes())
        .uint(101, amdgpu_image::FORMAT_VERSION.into())
        .msg(102, device_wire(&gpu))
        .0;
    assert_eq!(encode_message(&rn), golden);
    let decoded: CriuRenderNode = decode_message("amdgpu-renderD-4.img", &golden).unwrap();
    assert_eq!(decoded, rn);
    assert!(decoded.is_render_only());
    // Upstream's view: the same bytes without our tags are a complete
    // message with gpu_id 0 (which the C plugin maps to no GPU).
    let plain: CriuRenderNode = decode_message("amdgpu-renderD-4.img", &upstream.0).unwrap();
    assert_eq!(plain.device, None);
    assert_eq!(plain.gpu_id, 0);
}

#[test]
fn a_device_entry_missing_a_required_field_is_named() {
    let gpu = sample_kfd()
        .device_entries
        .into_iter()
        .find(KfdDeviceEntry::is_gpu)
        .unwrap();
    // The device entry without its simd_count (tag 4).
    let mut device = Wire::default();
    for (tag, v) in [(1u32, gpu.node_id), (2, gpu.gpu_id), (3, 0)] {
        device = device.uint(tag, v.into());
    }
    let golden = Wire::default()
        .uint(1, 0)
        .uint(2, 4)
        .uint(3, 128)
        .uint(4, 0)
        .msg(102, device)
        .0;
    let err = decode_message::<CriuRenderNode>("amdgpu-renderD-4.img", &golden).unwrap_err();
    assert!(
        err.to_string()
            .contains("criu_render_node.device[0].simd_count"),
        "{err}"
    );
}

/// The KFD pids of a render node named by a KFD process's user id: tag 103,
/// one unpacked varint per pid (proto2's repeated scalar), after tag 102.
#[test]
fn kfd_pids_are_unpacked_tag_103() {
    let rn = CriuRenderNode {
        gpu_id: 0x1234,
        id: 4,
        drm_render_minor: 128,
        num_of_bos: 0,
        bo_entries: Vec::new(),
        producer: None,
        format_version: None,
        message_checksum: None,
        device: None,
        kfd_pids: vec![1234, 5],
        ..Default::default()
    };
    let golden = Wire::default()
        .uint(1, 0x1234)
        .uint(2, 4)
        .uint(3, 128)
        .uint(4, 0)
        .uint(103, 1234)
        .uint(103, 5)
        .0;
    assert_eq!(encode_message(&rn), golden);
    let decoded: CriuRenderNode = decode_message("amdgpu-renderD-4.img", &golden).unwrap();
    assert_eq!(decoded, rn);
}
