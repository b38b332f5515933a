//! The `m0serve` binary: parse the flags, run the server, map the outcome to an exit code.

#[cfg(not(loom))]
fn main() {
    std::process::exit(m0serve::run());
}

#[cfg(loom)]
fn main() {}
