//! Memory shared between processes (`--metrics-port`'s counters): an anonymous file
//! (`memfd_create`) whose size is sealed, and a shared mapping of it that is unmapped when
//! dropped.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::syscall;

/// A new anonymous file of `len` bytes, zeroed (a fresh memfd reads as zeros),
/// close-on-exec, its size sealed: no process can shrink it under another's mapping.
pub(crate) fn sealed_memfd(name: &CStr, len: usize) -> io::Result<OwnedFd> {
    // The system call itself, not glibc's wrapper (glibc 2.27 and later): the wheels are
    // built for glibc 2.17 (manylinux2014).
    // SAFETY: memfd_create reads the NUL-terminated `name`, which outlives the call.
    let fd = unsafe {
        syscall!(syscall(
            libc::SYS_memfd_create,
            name.as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING
        ))
    }?;
    // SAFETY: memfd_create just returned this descriptor (a file descriptor fits a c_int);
    // it is owned once here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    // SAFETY: ftruncate on the descriptor `fd` owns, with a plain length.
    unsafe { syscall!(ftruncate(fd.as_raw_fd(), len as libc::off_t)) }?;
    // SAFETY: F_ADD_SEALS on the memfd `fd` owns, with plain flags.
    unsafe {
        syscall!(fcntl(
            fd.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL
        ))
    }?;
    Ok(fd)
}

/// A file's size in bytes.
pub(crate) fn file_len(fd: BorrowedFd<'_>) -> io::Result<usize> {
    // SAFETY: a zeroed stat is a valid out-buffer for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one stat into the live `st`.
    unsafe { syscall!(fstat(fd.as_raw_fd(), &mut st)) }?;
    Ok(st.st_size as usize)
}

/// A shared, read-write mapping of the first `len` bytes of a file; unmapped on drop.
pub(crate) struct Mapping {
    base: *mut u8,
    len: usize,
}

impl Mapping {
    /// Maps `len` bytes of `fd` (a file at least that long).
    pub(crate) fn shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of `len` bytes of a file at least that long; the
        // kernel picks the (page-aligned) address.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            base: base.cast(),
            len,
        })
    }

    /// Where the mapping starts (page-aligned), valid for `len` bytes until the drop.
    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `shared`; the owner keeps no
        // reference into it past its own drop.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}
