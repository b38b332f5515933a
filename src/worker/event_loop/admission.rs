//! Admission (`--max-queue-wait`): how long a request may wait in the worker for a handler.
//!
//! Every request is timed from the moment the loop had read it whole (`queued_at`). One
//! that would wait longer than the budget, at the pace the handlers have been finishing
//! requests, is answered `503` with `Retry-After` by the loop as soon as it is read; one
//! that has waited twice as long (the pace changed, a handler got stuck) is answered so
//! when the loop next looks at it. Neither reaches the app. A burst whose work fits in the
//! budget is served whole. Once the worker has refused a request at the door, it is
//! overloaded for a second after (each refusal starts the second again), and admits only
//! what would wait a fifth of the budget: under sustained overload the queue stays short,
//! so what is served is fresh (CoDel's standing queue, as "Fail at Scale" applies it to
//! requests), and what is not is told at once, where it can go elsewhere (a sibling worker
//! first: `accept.rs` defers taking connections meanwhile).

use std::time::{Duration, Instant};

use super::link::Handlers;

/// After a request was shed, how long the worker counts as shedding (`/readyz` answers
/// 503, `m0serve_workers_shedding` counts it).
pub(super) const SHEDDING_HOLD: Duration = Duration::from_secs(1);

/// A request waiting this many budgets is answered 503 from the queue.
const EXPIRY_BUDGETS: u32 = 2;

/// With no room at all (no handler can take a request within the budget: every one is
/// stuck on a slow request, and no thread can be added), a request that waited this long
/// is answered 503 from the queue.
const NO_ROOM_WAIT: Duration = Duration::from_millis(100);

/// Overloaded (a request refused at the door within `SHEDDING_HOLD`), a worker admits what
/// would wait this share of the budget.
const OVERLOADED_SHARE: u32 = 5;

pub(super) struct Admission {
    /// `--max-queue-wait`; `None`: off, requests wait without limit.
    budget: Option<Duration>,
    /// How many requests out on the handlers or waiting in the loop a new one may find
    /// ahead of it and still be taken within the budget (`refresh`).
    room: usize,
    /// Requests out that are bodies set aside for slow clients (`Handlers::aside`), at
    /// the last `refresh`: not ahead of anyone.
    aside: usize,
    /// Until when the worker counts as overloaded (the last refusal at the door, plus
    /// `SHEDDING_HOLD`).
    overloaded_until: Option<Instant>,
}

impl Admission {
    pub(super) fn new(budget: Option<Duration>) -> Admission {
        Admission {
            budget,
            room: usize::MAX,
            aside: 0,
            overloaded_until: None,
        }
    }

    /// The room for waiting requests, from the handlers' pace now: the budget's worth of
    /// their pieces of work, over the handlers that can take one (never less than finds
    /// one of those handlers free); overloaded, of `OVERLOADED_SHARE` of the budget.
    /// Unbounded before the pace is known, and when off. `now`, `now_ns`: the pass's
    /// clock, and as `stats::mono_ns`.
    pub(super) fn refresh(&mut self, handlers: &Handlers, now: Instant, now_ns: u64) {
        let Some(mut budget) = self.budget else {
            return;
        };
        let stuck = budget;
        self.aside = handlers.aside();
        if self.overloaded_until.is_some_and(|t| now < t) {
            budget /= OVERLOADED_SHARE;
        }
        self.room = match handlers.pace(stuck, now_ns) {
            Some((service, capacity)) => {
                let worth = budget.as_nanos() * capacity as u128 / service.as_nanos().max(1);
                usize::try_from(worth)
                    .unwrap_or(usize::MAX)
                    .max(capacity.saturating_sub(1))
            }
            None => usize::MAX,
        };
    }

    /// Whether a request read now, with `ahead` requests before it (out on the handlers or
    /// waiting in the loop, bodies set aside among them), may wait for a handler.
    pub(super) fn admits(&self, ahead: usize) -> bool {
        ahead.saturating_sub(self.aside) <= self.room
    }

    /// A request was refused at the door at `now` (`admits` said no): the worker is
    /// overloaded for `SHEDDING_HOLD`.
    pub(super) fn refused(&mut self, now: Instant) {
        self.overloaded_until = Some(now + SHEDDING_HOLD);
    }

    /// Whether a request read at `queued_at` has waited past twice the budget by `now`:
    /// admitted, it was expected to wait less than the budget, and the handlers' pace
    /// changed (one got stuck, the host got busy). The slack spares a burst admitted whole
    /// whose work runs a little slower than its pace said. With no room at all now, past
    /// `NO_ROOM_WAIT`.
    pub(super) fn expired(&self, queued_at: Instant, now: Instant) -> bool {
        let waited = now.saturating_duration_since(queued_at);
        self.budget.is_some_and(|b| {
            waited > b * EXPIRY_BUDGETS || (self.room == 0 && waited > NO_ROOM_WAIT)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_room(budget: Option<Duration>, room: usize) -> Admission {
        let mut a = Admission::new(budget);
        a.room = room;
        a
    }

    #[test]
    fn a_request_is_admitted_while_the_queue_fits_the_budget() {
        let a = with_room(Some(Duration::from_millis(500)), 50);
        assert!(a.admits(0));
        assert!(a.admits(50));
        assert!(!a.admits(51));
    }

    #[test]
    fn bodies_set_aside_are_not_ahead_of_anyone() {
        let mut a = with_room(Some(Duration::from_millis(500)), 5);
        assert!(!a.admits(45));
        a.aside = 40;
        assert!(a.admits(45));
        assert!(!a.admits(46));
    }

    #[test]
    fn with_no_room_a_held_request_expires_after_a_moment() {
        let mut a = with_room(Some(Duration::from_millis(500)), 1);
        let t = Instant::now();
        assert!(!a.expired(t, t + Duration::from_millis(300)));
        a.room = 0;
        assert!(!a.expired(t, t + NO_ROOM_WAIT));
        assert!(a.expired(t, t + NO_ROOM_WAIT + Duration::from_millis(1)));
    }

    #[test]
    fn off_admits_everything_and_nothing_expires() {
        let a = Admission::new(None);
        assert!(a.admits(usize::MAX - 1));
        let t = Instant::now();
        assert!(!a.expired(t, t + Duration::from_secs(3600)));
    }

    #[test]
    fn a_request_expires_past_twice_the_budget() {
        let a = Admission::new(Some(Duration::from_millis(500)));
        let t = Instant::now();
        assert!(!a.expired(t, t + Duration::from_millis(1000)));
        assert!(a.expired(t, t + Duration::from_millis(1001)));
    }
}
