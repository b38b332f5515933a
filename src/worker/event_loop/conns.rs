//! The connection table: a slot per connection, each with a generation that names which
//! connection holds it, the free slots, what the loop counts of them (all, the metrics
//! port's, the lingering), the lingering closes' deadlines, and the descriptor numbers
//! still lent to handlers after their connection closed.
//!
//! Invariants, kept by the table alone:
//! - a slot's generation changes exactly when its connection leaves it (`remove`), so a
//!   `ConnRef` or a token taken before the close never reaches the next connection;
//! - `open` counts the connections in slots, whether in place or taken out (`take`);
//! - a free slot holds no connection.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use mio::Token;

use crate::pipeline::departures::Departures;
use crate::pipeline::msg::ConnRef;
use crate::sys::listen::MAX_LISTENERS;
use crate::worker::conn::Conn;

/// `--metrics-port`'s listener.
pub(super) const METRICS: Token = Token(0);
pub(super) const WAKER: Token = Token(1);
pub(super) const SIGNALS: Token = Token(2);
/// Listeners take tokens `FIRST_LISTENER..FIRST_LISTENER + MAX_LISTENERS`, connections
/// the tokens from `FIRST_CONN` on.
pub(super) const FIRST_LISTENER: usize = 3;
const FIRST_CONN: usize = FIRST_LISTENER + MAX_LISTENERS;
/// A connection's token is `FIRST_CONN` plus its slot in the low half, and its generation
/// in the high half: an event taken before its connection closed is then never applied to
/// another accepted into the same slot before that event is handled (a pass may close one
/// while it serves the response rings, then accept into its slot).
const SLOT_BITS: u32 = usize::BITS / 2;
/// Slots a worker may have: each slot's token must keep clear of the generation's bits,
/// and each has its word in the departures.
const MAX_SLOTS: usize = {
    let tokens = (1 << SLOT_BITS) - FIRST_CONN;
    let words = Departures::CAPACITY;
    if tokens < words {
        tokens
    } else {
        words
    }
};

/// How long a closing connection may keep sending before it is dropped (lingering close).
const LINGER_TIMEOUT: Duration = Duration::from_secs(2);

/// The token a connection is registered with.
pub(super) fn conn_token(r: ConnRef) -> Token {
    Token(FIRST_CONN + r.slot as usize + ((r.gen as usize) << SLOT_BITS))
}

/// The slot a connection's token names, and whether `gen` (the slot's generation now) is
/// the one it was registered with (the part of it the token holds).
fn token_slot(t: usize, gen: impl FnOnce(usize) -> Option<u32>) -> Option<u32> {
    let n = t - FIRST_CONN;
    let slot = n & ((1 << SLOT_BITS) - 1);
    let now = gen(slot)?;
    (((now as usize) << SLOT_BITS) >> SLOT_BITS == n >> SLOT_BITS).then_some(slot as u32)
}

struct Slot {
    gen: u32,
    conn: Option<Box<Conn>>,
}

/// A connection taken out of its slot, so that the loop can work on it while it also
/// changes the rest of its state; `ConnTable::put_back` returns it.
#[must_use = "a taken connection goes back with `ConnTable::put_back`"]
pub(super) struct Taken {
    slot: u32,
    conn: Box<Conn>,
}

impl std::ops::Deref for Taken {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        &self.conn
    }
}

impl std::ops::DerefMut for Taken {
    fn deref_mut(&mut self) -> &mut Conn {
        &mut self.conn
    }
}

/// How many connections of each kind are open.
#[derive(Clone, Copy, Default)]
pub(super) struct Counts {
    pub(crate) open: usize,
    /// Of `open`, those that came to the metrics port.
    pub(crate) metrics: usize,
    /// Of `open`, those of the app's ports in their lingering close.
    pub(crate) lingering: usize,
}

impl Counts {
    /// The app's connections that take a `--max-connections` place (a lingering one is
    /// on its way out).
    pub(super) fn serving(&self) -> usize {
        self.open - self.metrics - self.lingering
    }

    /// The app's connections (the metrics' gauge).
    pub(super) fn app(&self) -> usize {
        self.open - self.metrics
    }
}

pub(super) struct ConnTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    counts: Counts,
    /// Lingering closes, by deadline (pushed in order: each gets the same timeout).
    lingering: VecDeque<(Instant, ConnRef)>,
    /// What a closed connection's descriptor holds while its socket is lent to a handler
    /// (an unconnected Unix socket: writes to it fail).
    placeholder: OwnedFd,
    /// Descriptor numbers of closed connections whose sockets are lent, by connection:
    /// each is freed when the lent request's final part comes back.
    reserved: Vec<(ConnRef, OwnedFd)>,
}

impl ConnTable {
    pub(super) fn new() -> std::io::Result<ConnTable> {
        Ok(ConnTable {
            slots: Vec::new(),
            free: Vec::new(),
            counts: Counts::default(),
            lingering: VecDeque::new(),
            // An unbound, unconnected datagram socket: every `send` to it fails.
            placeholder: std::os::unix::net::UnixDatagram::unbound()?.into(),
            reserved: Vec::new(),
        })
    }

    pub(super) fn counts(&self) -> Counts {
        self.counts
    }

    /// Slots numbered so far (closed ones included): `0..len()` covers every connection.
    pub(super) fn len(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Whether a new connection would find a slot.
    pub(super) fn has_room(&self) -> bool {
        !self.free.is_empty() || self.slots.len() < MAX_SLOTS
    }

    /// A slot for a new connection, and the reference it will have; `None` when there is
    /// none (`has_room` said so), or when the departures cannot follow a new slot.
    pub(super) fn reserve(&mut self, departures: &Departures) -> Option<ConnRef> {
        let slot = match self.free.pop() {
            Some(s) => s,
            None if self.slots.len() < MAX_SLOTS => {
                let slot = self.slots.len() as u32;
                if !departures.open(slot) {
                    return None;
                }
                self.slots.push(Slot { gen: 0, conn: None });
                slot
            }
            None => return None,
        };
        Some(ConnRef {
            slot,
            gen: self.slots[slot as usize].gen,
        })
    }

    /// Gives back a slot `reserve` gave that was not used.
    pub(super) fn unreserve(&mut self, r: ConnRef) {
        self.free.push(r.slot);
    }

    /// Puts a new connection into the slot `reserve` gave it.
    pub(super) fn insert(&mut self, conn: Box<Conn>) {
        let r = conn.me();
        self.counts.open += 1;
        self.counts.metrics += usize::from(conn.is_metrics());
        self.slots[r.slot as usize].conn = Some(conn);
    }

    /// The slot an event's token names, if the connection it was registered for holds it.
    pub(super) fn slot_of(&self, t: Token) -> Option<u32> {
        let slot = token_slot(t.0, |s| self.slots.get(s).map(|s| s.gen))?;
        self.slots[slot as usize].conn.is_some().then_some(slot)
    }

    pub(super) fn get_mut(&mut self, slot: u32) -> Option<&mut Conn> {
        self.slots.get_mut(slot as usize)?.conn.as_deref_mut()
    }

    /// The connection `r` names, if it is still open (in its slot).
    pub(super) fn by_ref(&mut self, r: ConnRef) -> Option<&mut Conn> {
        let s = self.slots.get_mut(r.slot as usize)?;
        if s.gen != r.gen {
            return None;
        }
        s.conn.as_deref_mut()
    }

    /// Takes the connection out of its slot (it stays counted, and its slot reserved).
    pub(super) fn take(&mut self, slot: u32) -> Option<Taken> {
        let conn = self.slots.get_mut(slot as usize)?.conn.take()?;
        Some(Taken { slot, conn })
    }

    pub(super) fn put_back(&mut self, taken: Taken) {
        self.slots[taken.slot as usize].conn = Some(taken.conn);
    }

    /// Takes a connection out for good: its slot's generation moves on and the slot is
    /// free again.
    pub(super) fn remove(&mut self, slot: u32) -> Option<Box<Conn>> {
        let s = self.slots.get_mut(slot as usize)?;
        let conn = s.conn.take()?;
        s.gen = s.gen.wrapping_add(1);
        self.free.push(slot);
        self.counts.open -= 1;
        if conn.is_metrics() {
            self.counts.metrics -= 1;
        } else if conn.is_lingering() {
            self.counts.lingering -= 1;
        }
        Some(conn)
    }

    /// Its lingering close began: it is closed at the latest `LINGER_TIMEOUT` from `now`.
    pub(super) fn linger(&mut self, r: ConnRef, counted: bool, now: Instant) {
        if counted {
            self.counts.lingering += 1;
        }
        self.lingering.push_back((now + LINGER_TIMEOUT, r));
    }

    /// The next lingering close whose time is up, if any (the caller closes it).
    pub(super) fn next_expired_linger(&mut self, now: Instant) -> Option<ConnRef> {
        while let Some(&(t, r)) = self.lingering.front() {
            if t > now {
                return None;
            }
            self.lingering.pop_front();
            if self.by_ref(r).is_some() {
                return Some(r);
            }
        }
        None
    }

    /// When the first lingering close runs out.
    pub(super) fn next_linger_deadline(&self) -> Option<Instant> {
        self.lingering.front().map(|&(t, _)| t)
    }

    pub(super) fn placeholder(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.placeholder.as_fd()
    }

    /// Keeps a closed connection's lent descriptor number until its request's final part.
    pub(super) fn keep_reserved(&mut self, r: ConnRef, fd: OwnedFd) {
        self.reserved.push((r, fd));
    }

    /// The final part of a request on closed connection `r` came back: frees the
    /// descriptor number its socket had, if it was lent. `true` when it did.
    pub(super) fn release_reserved(&mut self, r: ConnRef) -> bool {
        let Some(i) = self.reserved.iter().position(|(c, _)| *c == r) else {
            return false;
        };
        self.reserved.swap_remove(i);
        true
    }

    /// At exit: a handler still inside the app (one past the graceful timeout) may yet
    /// write to a socket it was lent, so those descriptor numbers stay taken until the
    /// process exits, and nothing it opens meanwhile can receive that write.
    pub(super) fn leak_reserved(&mut self) {
        std::mem::forget(std::mem::take(&mut self.reserved));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_slot_only_while_the_slot_holds_the_same_generation() {
        for (slot, gen) in [
            (0, 0),
            (5, 7),
            (1000, u32::MAX),
            ((MAX_SLOTS - 1) as u32, 3),
        ] {
            let Token(t) = conn_token(ConnRef { slot, gen });
            assert!(t >= FIRST_CONN);
            assert_eq!(
                token_slot(t, |s| (s == slot as usize).then_some(gen)),
                Some(slot)
            );
            // The slot was closed and taken by another connection since.
            let next = gen.wrapping_add(1);
            assert_eq!(
                token_slot(t, |s| (s == slot as usize).then_some(next)),
                None
            );
            // The slot is gone.
            assert_eq!(token_slot(t, |_| None), None);
        }
    }
}
