//! Hostile sysfs trees: malformed files are errors naming the file and line,
//! hidden or vanishing nodes are skips, and nothing panics.

mod fixture_dir;

use std::cell::{Cell, RefCell};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use amdgpu_topology::memfs::MemoryFs;
use amdgpu_topology::parse::{
    parse_properties, parse_with, Note, RealFs, SyntaxError, SysfsReader, MAX_FILE_SIZE,
};
use amdgpu_topology::write::{write_with, SysfsWriter};
use amdgpu_topology::{builtin, parse, ParseError, SkipReason};
use fixture_dir::fixture;
use proptest::prelude::*;

/// A copy of a fixture in a temp dir, safe to damage.
fn copy_of(name: &str) -> Option<tempfile::TempDir> {
    fn copy(from: &Path, to: &Path) {
        fs::create_dir_all(to).unwrap();
        for entry in fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                fs::copy(entry.path(), target).unwrap();
            }
        }
    }
    let source = fixture(name)?;
    let tmp = tempfile::tempdir().unwrap();
    copy(&source, tmp.path());
    Some(tmp)
}

fn syntax_error(root: &Path) -> (PathBuf, usize, SyntaxError) {
    match parse(root) {
        Err(ParseError::Syntax { path, line, reason }) => (path, line, reason),
        other => panic!("expected a syntax error, got {other:?}"),
    }
}

/// Replaces line `key ...` of a properties file.
fn edit_line(path: &Path, key: &str, replacement: &str) {
    let text = fs::read_to_string(path).unwrap();
    let edited: Vec<String> = text
        .lines()
        .map(|l| {
            if l.split(' ').next() == Some(key) {
                replacement.to_owned()
            } else {
                l.to_owned()
            }
        })
        .collect();
    fs::write(path, edited.join("\n") + "\n").unwrap();
}

#[test]
fn malformed_values_name_file_and_line() {
    let Some(tmp) = copy_of("vega10-mi25-1gpu") else {
        return;
    };
    let props = tmp.path().join("nodes/1/properties");
    let pristine = fs::read(&props).unwrap();
    // simd_count is line 2 of a node's properties.
    for (line, expected) in [
        ("simd_count many", SyntaxError::NotANumber("many".into())),
        (
            "simd_count 18446744073709551616",
            SyntaxError::Overflow("18446744073709551616".into()),
        ),
        ("simd_count", SyntaxError::MissingValue("simd_count".into())),
        ("simd_count 1 2", SyntaxError::TrailingText("2".into())),
        (
            "cpu_cores_count 0",
            SyntaxError::DuplicateKey("cpu_cores_count".into()),
        ),
    ] {
        fs::write(&props, &pristine).unwrap();
        edit_line(&props, "simd_count", line);
        let (path, line_no, reason) = syntax_error(tmp.path());
        assert_eq!(path, props, "{line}");
        assert_eq!(line_no, 2, "{line}");
        assert_eq!(reason, expected, "{line}");
    }

    fs::write(&props, "").unwrap();
    assert_eq!(
        syntax_error(tmp.path()),
        (props.clone(), 1, SyntaxError::Empty)
    );

    let mut bad_utf8 = pristine.clone();
    bad_utf8.extend_from_slice(b"name \xc3\x28\n");
    fs::write(&props, &bad_utf8).unwrap();
    let (_, _, reason) = syntax_error(tmp.path());
    assert_eq!(reason, SyntaxError::NotUtf8);
    fs::write(&props, &pristine).unwrap();

    // Errors in the other files are caught the same way.
    let link = tmp.path().join("nodes/0/io_links/0/properties");
    edit_line(&link, "weight", "weight -20");
    let (path, line, _) = syntax_error(tmp.path());
    assert_eq!((path, line), (link.clone(), 6));
    fs::copy(
        fixture("vega10-mi25-1gpu")
            .unwrap()
            .join("nodes/0/io_links/0/properties"),
        &link,
    )
    .unwrap();

    let gpu_id = tmp.path().join("nodes/1/gpu_id");
    fs::write(&gpu_id, "0x33cd\n").unwrap();
    assert_eq!(syntax_error(tmp.path()).0, gpu_id);
    fs::write(&gpu_id, "4294967296\n").unwrap();
    assert!(matches!(
        syntax_error(tmp.path()).2,
        SyntaxError::Overflow(_)
    ));
    fs::write(&gpu_id, "").unwrap();
    assert_eq!(syntax_error(tmp.path()).2, SyntaxError::Empty);
    fs::write(&gpu_id, "13261\n").unwrap();

    let used = tmp.path().join("nodes/1/mem_banks/0/used_memory");
    fs::write(&used, "lots\n").unwrap();
    assert_eq!(syntax_error(tmp.path()).0, used);
    fs::write(&used, "1\n").unwrap();

    fs::write(tmp.path().join("generation_id"), "two\n").unwrap();
    assert_eq!(syntax_error(tmp.path()).0, tmp.path().join("generation_id"));
    fs::write(tmp.path().join("generation_id"), "2\n").unwrap();
    parse(tmp.path()).expect("repaired tree parses");
}

#[test]
fn huge_files_are_refused_without_reading_them_whole() {
    let Some(tmp) = copy_of("vega10-mi25-1gpu") else {
        return;
    };
    let props = tmp.path().join("nodes/0/properties");
    let line = "padding_key 1\n";
    let text = line.repeat(MAX_FILE_SIZE / line.len() + 1);
    fs::write(&props, text).unwrap();
    match parse(tmp.path()) {
        Err(ParseError::TooLarge { path, limit }) => {
            assert_eq!((path, limit), (props, MAX_FILE_SIZE));
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

#[test]
fn crlf_and_trailing_blanks_are_tolerated() {
    let Some(tmp) = copy_of("vega10-mi25-1gpu") else {
        return;
    };
    let original = parse(tmp.path()).unwrap().system;
    let props = tmp.path().join("nodes/1/properties");
    let text = fs::read_to_string(&props).unwrap();
    fs::write(&props, text.replace('\n', " \r\n")).unwrap();
    assert_eq!(parse(tmp.path()).unwrap().system, original);
}

#[test]
fn missing_files_are_skips_or_notes() {
    let Some(tmp) = copy_of("mi210-8gpu-xgmi-2hives") else {
        return;
    };
    let root = tmp.path();
    fs::remove_file(root.join("nodes/5/properties")).unwrap();
    fs::remove_file(root.join("nodes/8/io_links/3/properties")).unwrap();
    fs::remove_dir_all(root.join("nodes/7/p2p_links")).unwrap();
    fs::create_dir(root.join("nodes/not-a-node")).unwrap();
    fs::create_dir(root.join("nodes/02")).unwrap();
    fs::write(root.join("nodes/40"), "a file where a node should be\n").unwrap();

    let parsed = parse(root).unwrap();
    let skipped: Vec<(u32, SkipReason)> =
        parsed.skipped.iter().map(|s| (s.node, s.reason)).collect();
    assert_eq!(
        skipped,
        vec![
            (5, SkipReason::MissingFile),
            (8, SkipReason::MissingFile),
            (40, SkipReason::NotADirectory),
        ]
    );
    assert_eq!(parsed.skipped[0].path, root.join("nodes/5/properties"));
    assert_eq!(
        parsed.skipped[1].path,
        root.join("nodes/8/io_links/3/properties")
    );
    let s = &parsed.system;
    assert_eq!(s.nodes.len(), 8);
    assert!(s.node(5).is_none());
    assert!(s.node(7).unwrap().p2p_links.is_none());
    assert!(s.node(7).unwrap().io_links.is_some());
    // Partial capture: no gpu_id and no mem_banks anywhere, each noted.
    assert!(parsed.notes.contains(&Note::MissingGpuId { node: 6 }));
    assert!(parsed.notes.contains(&Note::MissingMemBanks { node: 7 }));
    assert!(parsed.notes.contains(&Note::IgnoredEntry {
        path: root.join("nodes/not-a-node")
    }));
    assert!(parsed.notes.contains(&Note::IgnoredEntry {
        path: root.join("nodes/02")
    }));
    // The hives are what remains reachable over bidirectional XGMI links.
    let hives: Vec<Vec<u32>> = s.hives().into_iter().map(|h| h.nodes).collect();
    assert_eq!(hives, vec![vec![2, 3, 4], vec![6, 7, 9]]);
}

#[test]
fn no_nodes_directory_is_no_topology() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(matches!(
        parse(tmp.path()),
        Err(ParseError::NoTopology { .. })
    ));
    assert!(matches!(
        parse(&tmp.path().join("absent")),
        Err(ParseError::NoTopology { .. })
    ));
}

#[test]
fn chmod_000_node_is_skipped_unless_privileged() {
    use std::os::unix::fs::PermissionsExt;
    // Root reads past chmod 000 (CAP_DAC_OVERRIDE): as root, as in CI, the
    // test runs again as an unprivileged user, where the mode denies.
    if !test_env::unprivileged::run_here("chmod_000_node_is_skipped_unless_privileged") {
        return;
    }
    let Some(tmp) = copy_of("vega10-mi25-1gpu") else {
        return;
    };
    let node = tmp.path().join("nodes/1");
    fs::set_permissions(&node, fs::Permissions::from_mode(0o000)).unwrap();
    let denied = fs::read(node.join("properties")).is_err();
    let parsed = parse(tmp.path());
    fs::set_permissions(&node, fs::Permissions::from_mode(0o755)).unwrap();
    assert!(
        denied,
        "chmod 000 does not deny reads to this process, which cannot read past permissions"
    );
    let parsed = parsed.unwrap();
    assert_eq!(parsed.skipped.len(), 1);
    assert_eq!(parsed.skipped[0].node, 1);
    assert_eq!(parsed.skipped[0].reason, SkipReason::AccessDenied);
    assert_eq!(parsed.system.nodes.len(), 1);
}

/// A reader that fails reads below `prefix` with `errno`, like the device
/// cgroup does for hidden GPUs.
struct Failing<R> {
    inner: R,
    prefix: PathBuf,
    errno: i32,
}

impl<R: SysfsReader> SysfsReader for Failing<R> {
    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.inner.read_dir(path)
    }
    fn is_dir(&self, path: &Path) -> io::Result<bool> {
        self.inner.is_dir(path)
    }
    fn read(&self, path: &Path, limit: usize) -> io::Result<Vec<u8>> {
        if path.starts_with(&self.prefix) {
            return Err(io::Error::from_raw_os_error(self.errno));
        }
        self.inner.read(path, limit)
    }
}

#[test]
fn device_cgroup_eperm_skips_the_node() {
    let Some(dir) = fixture("mi210-8gpu-xgmi-2hives") else {
        return;
    };
    for (prefix, errno) in [
        ("nodes/3", libc_eperm()),
        ("nodes/3/io_links/2", libc_eperm()),
        ("nodes/3", 13), // EACCES
    ] {
        let reader = Failing {
            inner: RealFs,
            prefix: dir.join(prefix),
            errno,
        };
        let parsed = parse_with(&reader, &dir).unwrap();
        assert_eq!(parsed.skipped.len(), 1, "{prefix}");
        let skip = &parsed.skipped[0];
        assert_eq!((skip.node, skip.reason), (3, SkipReason::AccessDenied));
        assert!(
            skip.path.starts_with(dir.join(prefix)),
            "{}",
            skip.path.display()
        );
        let s = &parsed.system;
        assert_eq!(s.gpus().count(), 7);
        // Node 3's hive mates still form a hive; the links to 3 dangle.
        let hives = s.hives();
        assert_eq!(hives[0].nodes, vec![2, 4, 5]);
        assert_eq!(hives[1].nodes, vec![6, 7, 8, 9]);
    }
}

#[test]
fn other_io_errors_fail_the_parse_naming_the_file() {
    let Some(dir) = fixture("mi210-8gpu-xgmi-2hives") else {
        return;
    };
    let reader = Failing {
        inner: RealFs,
        prefix: dir.join("nodes/4/properties"),
        errno: 5, // EIO
    };
    match parse_with(&reader, &dir) {
        Err(ParseError::Io { path, source }) => {
            assert_eq!(path, dir.join("nodes/4/properties"));
            assert_eq!(source.raw_os_error(), Some(5));
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
}

fn libc_eperm() -> i32 {
    1
}

/// A reader over a [`MemoryFs`] that runs `hook` before each read, to stage
/// changes between the parser's directory listing and its reads.
struct Staged<F: Fn(&mut MemoryFs, &Path)> {
    tree: RefCell<MemoryFs>,
    hook: F,
}

impl<F: Fn(&mut MemoryFs, &Path)> SysfsReader for Staged<F> {
    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.tree.borrow().read_dir(path)
    }
    fn is_dir(&self, path: &Path) -> io::Result<bool> {
        self.tree.borrow().is_dir(path)
    }
    fn read(&self, path: &Path, limit: usize) -> io::Result<Vec<u8>> {
        (self.hook)(&mut self.tree.borrow_mut(), path);
        self.tree.borrow().read(path, limit)
    }
}

fn tree_of(name: &str) -> MemoryFs {
    let mut tree = MemoryFs::new();
    write_with(&mut tree, &builtin(name).unwrap(), Path::new("/t")).unwrap();
    tree
}

#[test]
fn node_removed_between_readdir_and_read_is_a_skip() {
    let root = Path::new("/t");
    let reader = Staged {
        tree: RefCell::new(tree_of("mi210-8gpu-2hive")),
        hook: |tree: &mut MemoryFs, path: &Path| {
            if path == Path::new("/t/nodes/5/properties") {
                tree.remove(Path::new("/t/nodes/5"));
            }
        },
    };
    let parsed = parse_with(&reader, root).unwrap();
    assert_eq!(parsed.skipped.len(), 1);
    assert_eq!(parsed.skipped[0].node, 5);
    assert_eq!(parsed.skipped[0].reason, SkipReason::Vanished);
    assert_eq!(parsed.system.gpus().count(), 7);
}

#[test]
fn generation_change_during_the_read_rereads() {
    let root = Path::new("/t");
    let bumps = Cell::new(0u32);
    let reader = Staged {
        tree: RefCell::new(tree_of("single-gpu")),
        hook: |tree: &mut MemoryFs, path: &Path| {
            // The first time node 1 is read, a hot-plug bumps the generation.
            if path == Path::new("/t/nodes/1/properties") && bumps.get() == 0 {
                bumps.set(1);
                tree.write_file(Path::new("/t/generation_id"), b"1000\n")
                    .unwrap();
            }
        },
    };
    let parsed = parse_with(&reader, root).unwrap();
    let before = builtin("single-gpu").unwrap().generation_id.unwrap();
    assert_eq!(
        parsed.notes.first(),
        Some(&Note::Reread {
            before,
            after: 1000
        })
    );
    assert_eq!(parsed.system.generation_id, Some(1000));

    // A tree that never settles is an error, not an endless loop.
    let counter = Cell::new(2000u64);
    let reader = Staged {
        tree: RefCell::new(tree_of("single-gpu")),
        hook: |tree: &mut MemoryFs, path: &Path| {
            if path == Path::new("/t/nodes/1/properties") {
                counter.set(counter.get() + 1);
                let text = format!("{}\n", counter.get());
                tree.write_file(Path::new("/t/generation_id"), text.as_bytes())
                    .unwrap();
            }
        },
    };
    assert!(matches!(
        parse_with(&reader, root),
        Err(ParseError::Unstable { .. })
    ));
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_properties(&bytes, Path::new("p"));
    }

    #[test]
    fn arbitrary_lines_never_panic(text in "([a-z_]{0,6}[ \t]{0,2}[0-9,x-]{0,22}[ \r]{0,2}\n){0,6}") {
        let _ = parse_properties(text.as_bytes(), Path::new("p"));
    }

    #[test]
    fn written_properties_parse_back(
        entries in proptest::collection::btree_map("[a-z_][a-z0-9_]{0,20}", any::<u64>(), 1..20)
    ) {
        let props: amdgpu_topology::Properties = entries.into_iter().collect();
        let text = amdgpu_topology::write::format_properties(&props);
        prop_assert_eq!(parse_properties(text.as_bytes(), Path::new("p")).unwrap(), props);
    }
}
