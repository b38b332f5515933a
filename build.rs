//! Embeds an rpath to the libpython the crate was built against, so the binary starts
//! without `LD_LIBRARY_PATH` (pyenv and most source builds keep libpython outside the
//! loader's default paths).
fn main() {
    let cfg = pyo3_build_config::get();
    if let Some(dir) = cfg.lib_dir() {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    // The interpreter's own path: without a virtualenv, Python's path configuration starts
    // from it, so the stdlib found at run time is the one the binary was linked against.
    if let Some(exe) = cfg.executable() {
        println!("cargo:rustc-env=M0SERVE_BUILD_PYTHON={exe}");
    }
    println!("cargo:rerun-if-env-changed=PYO3_PYTHON");
}
