//! Exports only this crate's own symbols from the interposer: the
//! `#[no_mangle]` items of the crates it links (the plugin's
//! `CR_PLUGIN_DESC`, through the CRIU host emulator) stay inside it. A
//! preloaded copy of `CR_PLUGIN_DESC` would otherwise take the place of
//! the real plugin's own in CRIU (its references to its descriptor bind to
//! the first definition in the process), so the plugin's load-time setup
//! would write into the interposer's copy.

fn main() {
    // Symbols of archives (the dependencies' rlibs) are not exported.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-libs,ALL");
}
