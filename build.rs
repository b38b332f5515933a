//! The binary embeds CPython: it gets an rpath to the libpython the crate was built against,
//! so it starts without `LD_LIBRARY_PATH` (pyenv and most source builds keep libpython
//! outside the loader's default paths), and the build interpreter's path, which is where
//! Python's path configuration starts when no virtualenv is chosen.
//!
//! The Python package's extension module (maturin sets `PYO3_BUILD_EXTENSION_MODULE`) gets
//! neither: it runs inside whichever interpreter imports it, links no libpython, and records
//! no path of the build machine.
fn main() {
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
    println!("cargo:rerun-if-env-changed=PYO3_BUILD_EXTENSION_MODULE");
    if std::env::var_os("PYO3_BUILD_EXTENSION_MODULE").is_some() {
        return;
    }
    let cfg = pyo3_build_config::get();
    if let Some(dir) = cfg.lib_dir() {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    if let Some(exe) = cfg.executable() {
        println!("cargo:rustc-env=M0SERVE_BUILD_PYTHON={exe}");
    }
}
