//! Which connections' clients have left, for the handler threads: one word per connection
//! slot, holding `ConnRef::packed` of the last connection in that slot that departed. The
//! loop writes a word when a connection with requests in flight loses its client (a
//! reset, an end of stream, a close) or will answer nothing more (a response closed it
//! with requests pipelined behind); a handler reads the word of its request's connection
//! before it calls the app, between body items, and when the app asks
//! `m0serve.client_disconnected()`. Any number of departures are remembered, each until
//! its slot's next connection departs, and a request costs the loop nothing: the word is
//! written only when a client leaves.
//!
//! The slots of a worker's connection table map to words in chunks allocated as the
//! table grows, so a worker with a few connections holds one chunk, and a word never
//! moves once a handler may read it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::pipeline::msg::ConnRef;

/// Words per chunk (32 KiB).
const CHUNK: usize = 4096;
/// Chunks at most: `CAPACITY` slots.
const CHUNKS: usize = 1024;
/// No connection departed in the slot yet (no slot has this number: see `CAPACITY`).
const NONE: u64 = u64::MAX;

/// See the module documentation.
pub(crate) struct Departures {
    chunks: Box<[OnceLock<Box<[AtomicU64]>>]>,
}

impl Default for Departures {
    fn default() -> Self {
        Departures {
            chunks: (0..CHUNKS).map(|_| OnceLock::new()).collect(),
        }
    }
}

impl Departures {
    /// Connection slots it has words for (4 Mi): the loop opens no slot past it.
    pub(crate) const CAPACITY: usize = CHUNK * CHUNKS;

    /// Loop: slot `slot` is about to be used for the first time. `false` past `CAPACITY`.
    pub(crate) fn open(&self, slot: u32) -> bool {
        let Some(chunk) = self.chunks.get(slot as usize / CHUNK) else {
            return false;
        };
        chunk.get_or_init(|| (0..CHUNK).map(|_| AtomicU64::new(NONE)).collect());
        true
    }

    /// Loop: the client of `r` has left, or `r` answers nothing more.
    pub(crate) fn depart(&self, r: ConnRef) {
        if let Some(word) = self.word(r.slot) {
            // Release: pairs with the Acquire load in `departed`, so a handler that sees
            // the departure also sees what the loop did before it (a stream cancelled).
            word.store(r.packed(), Ordering::Release);
        }
    }

    /// Handler: whether the connection `packed` (`ConnRef::packed`) has departed. A slot's
    /// word holds its last departed connection. A slot takes a new connection only once
    /// its last has closed, so every connection of an older generation than the word's is
    /// gone too (a later departure in the slot never erases an earlier one), and a newer
    /// one reads as not departed until it departs itself. Generations are compared
    /// wrapping, within half their range: a connection older by 2^31 generations of its
    /// slot, each a connection accepted and closed, reads as not departed.
    pub(crate) fn departed(&self, packed: u64) -> bool {
        let slot = (packed >> 32) as u32;
        let Some(word) = self.word(slot) else {
            return false;
        };
        // Acquire: pairs with the Release store in `depart`.
        let last = word.load(Ordering::Acquire);
        if last >> 32 != packed >> 32 {
            // `NONE`: no connection of the slot has departed.
            return false;
        }
        let (last_gen, gen) = (last as u32, packed as u32);
        (last_gen.wrapping_sub(gen) as i32) >= 0
    }

    fn word(&self, slot: u32) -> Option<&AtomicU64> {
        let slot = slot as usize;
        // The chunk's `OnceLock` publishes its words (the loop opened the slot before any
        // request of it reached a handler).
        self.chunks.get(slot / CHUNK)?.get()?.get(slot % CHUNK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(slot: u32, gen: u32) -> ConnRef {
        ConnRef { slot, gen }
    }

    #[test]
    fn every_departure_is_remembered_until_its_slot_departs_again() {
        let d = Departures::default();
        for slot in 0..10_000 {
            assert!(d.open(slot));
        }
        // Any number of them, none forgotten.
        for slot in 0..10_000 {
            d.depart(r(slot, 7));
        }
        assert!((0..10_000).all(|slot| d.departed(r(slot, 7).packed())));
        // The slot's next connection has not departed; once it does, it has.
        assert!(!d.departed(r(5, 8).packed()));
        d.depart(r(5, 8));
        assert!(d.departed(r(5, 8).packed()));
        assert!(!d.departed(r(6, 8).packed()));
        // A later departure in the slot keeps the earlier ones: a client that leaves and
        // retries, again and again, into the same slot.
        for gen in 9..20 {
            d.depart(r(5, gen));
        }
        assert!((7..20).all(|gen| d.departed(r(5, gen).packed())));
        assert!(!d.departed(r(5, 20).packed()));
        // Across the generation's wrap.
        d.depart(r(9, 2));
        assert!(d.departed(r(9, u32::MAX).packed()) && d.departed(r(9, 1).packed()));
        assert!(!d.departed(r(9, 3).packed()));
    }

    #[test]
    fn unopened_and_out_of_range_slots_never_depart() {
        let d = Departures::default();
        // A slot never opened: nothing to write, nothing departed.
        d.depart(r(3, 0));
        assert!(!d.departed(r(3, 0).packed()));
        assert!(!d.open(Departures::CAPACITY as u32));
        assert!(d.open(Departures::CAPACITY as u32 - 1));
        let last = r(Departures::CAPACITY as u32 - 1, 0);
        d.depart(last);
        assert!(d.departed(last.packed()));
        // `NONE` is no connection.
        assert!(!d.departed(NONE));
    }
}
