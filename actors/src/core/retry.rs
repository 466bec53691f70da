//! How long a stage that failed waits before it tries again: one exponential backoff for every
//! stage that restarts itself (the watcher's rescans, the writer's restarts).

use std::time::Duration;

/// The first wait.
pub const START: Duration = Duration::from_millis(250);
/// The longest wait: a fault that lasts is retried twice a minute, not forgotten.
pub const MAX: Duration = Duration::from_secs(30);

/// The wait after the `failures`-th failure in a row: 250 ms, doubling, up to 30 s.
pub fn after(failures: u32) -> Duration {
    // 2^7 × 250 ms already passes the cap; a larger exponent would only overflow.
    (START * 2u32.pow(failures.saturating_sub(1).min(8))).min(MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_from_the_first_failure_up_to_the_cap() {
        let ms = |n| after(n).as_millis();
        assert_eq!((ms(0), ms(1), ms(2), ms(3)), (250, 250, 500, 1000));
        assert_eq!(ms(8), 30_000);
        assert_eq!(ms(u32::MAX), 30_000, "never overflows");
    }
}
