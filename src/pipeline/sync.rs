//! The synchronisation primitives the lock-free code (`ring`, `park`) is written against:
//! loom's under `--cfg loom`, so the model checker sees every atomic access, every slot
//! access and every park; std's otherwise, at zero cost.
//!
//! `UnsafeCell` follows loom's API (`with` / `with_mut` closures over a raw pointer) in both
//! builds, because loom can only check "no slot read before it is written" through it.
//! `Arc` is here too: loom must see the reference count's synchronisation, or the last
//! handle's drop looks like a race with the other thread's final slot accesses.

#[cfg(loom)]
pub(crate) use loom::{
    cell::UnsafeCell,
    sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering},
    sync::Arc,
    thread,
};

#[cfg(not(loom))]
pub(crate) use std::{
    sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering},
    sync::Arc,
    thread,
};

/// One step of a busy-wait. Under loom it yields, so the model can schedule the thread that
/// the spinner is waiting for instead of exploring the spin forever.
#[cfg(loom)]
pub(crate) fn spin_hint() {
    loom::thread::yield_now();
}

/// One step of a busy-wait (`pause` on x86, `yield`/`isb` on ARM).
// `park` spins through `crossbeam_utils::Backoff` outside loom; this is for other spinners.
#[cfg(not(loom))]
#[cfg_attr(not(test), allow(dead_code))]
#[inline]
pub(crate) fn spin_hint() {
    std::hint::spin_loop();
}

/// `std::cell::UnsafeCell` with loom's closure API. The closures get the same raw pointer
/// `UnsafeCell::get` would; all the obligations of dereferencing it stay with the caller.
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    #[inline]
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Shared access: the pointer may only be read through.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Exclusive access: the caller guarantees no other access to the value overlaps.
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
