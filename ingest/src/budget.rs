//! A time budget for the work on one page. The loops whose work grows with a page's size tick it;
//! it looks at the clock every [`CHECK_EVERY`] ticks, so a check costs a counter increment.
//!
//! Every stage is linear in its input and the input is capped, so the budget is a second line of
//! defence: a page that still finds a slow path fails with a reason instead of holding a worker.

use std::cell::Cell;
use std::time::{Duration, Instant};

const CHECK_EVERY: u32 = 1024;

/// The page ran out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget;

/// A deadline, or none.
#[derive(Debug)]
pub struct Budget {
    deadline: Option<Instant>,
    ticks: Cell<u32>,
}

impl Budget {
    /// No deadline.
    pub fn unlimited() -> Self {
        Self { deadline: None, ticks: Cell::new(0) }
    }

    /// A deadline `limit` from now (`Duration::ZERO`: none).
    pub fn new(limit: Duration) -> Self {
        Self { deadline: (!limit.is_zero()).then(|| Instant::now() + limit), ticks: Cell::new(0) }
    }

    /// One unit of work done.
    pub fn tick(&self) -> Result<(), OverBudget> {
        let Some(deadline) = self.deadline else { return Ok(()) };
        let n = self.ticks.get().wrapping_add(1);
        self.ticks.set(n);
        if n.is_multiple_of(CHECK_EVERY) && Instant::now() >= deadline { Err(OverBudget) } else { Ok(()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expired_deadline_is_noticed_within_a_check_period() {
        let b = Budget::new(Duration::from_nanos(1));
        std::thread::sleep(Duration::from_millis(1));
        assert!((0..CHECK_EVERY).any(|_| b.tick().is_err()));
        let free = Budget::unlimited();
        assert!((0..10 * CHECK_EVERY).all(|_| free.tick().is_ok()));
    }
}
