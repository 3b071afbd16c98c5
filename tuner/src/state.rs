//! Packed system state of the exact solvers: per model, waiting count, running batch, remaining slots.
//!
//! One `u128` holds up to four models, 32 bits each: waiting (8 bits), batch (8 bits), remaining
//! slots (16 bits). Packing keeps the hash map of reachable states small and hashing cheap, and
//! routed arrivals become plain additions of precomputed increments.

use super::error::TunerError;
use super::inputs::TunerInputs;
use std::hash::{BuildHasherDefault, Hasher};

/// Most models one packed state holds.
pub(crate) const MAX_MODELS: usize = 4;
/// Largest concurrency the 8-bit counters hold.
pub(crate) const MAX_CONCURRENCY: usize = 255;
/// Longest step, in slots, the 16-bit counter holds.
pub(crate) const MAX_SLOTS: u32 = u16::MAX as u32;

/// The state of every model, packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PackedState(pub u128);

impl PackedState {
    /// Requests waiting for model `m`.
    pub fn waiting(self, m: usize) -> usize {
        ((self.0 >> (32 * m)) & 0xff) as usize
    }
    /// Batch of the step model `m` runs (0 when idle).
    pub fn batch(self, m: usize) -> usize {
        ((self.0 >> (32 * m + 8)) & 0xff) as usize
    }
    /// Slots until model `m`'s running step ends (0 when idle).
    pub fn remaining(self, m: usize) -> u32 {
        ((self.0 >> (32 * m + 16)) & 0xffff) as u32
    }
    /// This state with model `m` set to `(waiting, batch, remaining)`.
    pub fn with_model(self, m: usize, waiting: usize, batch: usize, remaining: u32) -> Self {
        let field = (waiting as u128) | ((batch as u128) << 8) | ((remaining as u128) << 16);
        let cleared = self.0 & !(0xffff_ffffu128 << (32 * m));
        PackedState(cleared | (field << (32 * m)))
    }
    /// The increment that adds one waiting request at model `m`.
    pub fn waiting_unit(m: usize) -> u128 {
        1u128 << (32 * m)
    }
    /// Human-readable form, e.g. `[quick: waiting 1, idle; reference: waiting 2, idle]`.
    pub fn describe(self, names: &[String]) -> String {
        let parts: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(m, name)| {
                if self.remaining(m) == 0 {
                    format!("{name}: waiting {}, idle", self.waiting(m))
                } else {
                    format!(
                        "{name}: waiting {}, running batch {} with {} slots left",
                        self.waiting(m),
                        self.batch(m),
                        self.remaining(m)
                    )
                }
            })
            .collect();
        format!("[{}]", parts.join("; "))
    }
}

/// Fails when the inputs do not fit the packed encoding.
pub(crate) fn check_packable(inputs: &TunerInputs) -> Result<(), TunerError> {
    if inputs.models() > MAX_MODELS {
        return Err(TunerError::Unsupported {
            what: format!(
                "{} models; the exact solvers handle at most {MAX_MODELS} (use --simulate)",
                inputs.models()
            ),
        });
    }
    if inputs.concurrency() > MAX_CONCURRENCY {
        return Err(TunerError::Unsupported {
            what: format!(
                "concurrency {} exceeds {MAX_CONCURRENCY}",
                inputs.concurrency()
            ),
        });
    }
    for m in 0..inputs.models() {
        for b in 1..=inputs.concurrency() {
            if inputs.slots(m, b) > MAX_SLOTS {
                return Err(TunerError::Unsupported {
                    what: format!(
                        "model {m} step of {} slots exceeds {MAX_SLOTS}; use a coarser --delta-ms",
                        inputs.slots(m, b)
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Multiply-fold hasher for packed states: std's SipHash dominates the reachability search otherwise.
#[derive(Default)]
pub(crate) struct StateHasher(u64);

impl Hasher for StateHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 =
                (self.0.rotate_left(5) ^ u64::from(byte)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, value: u64) {
        let mixed = value.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = mixed ^ (mixed >> 31);
    }
    fn write_u128(&mut self, value: u128) {
        let folded = (value as u64) ^ ((value >> 64) as u64).rotate_left(29);
        let mixed = folded.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = mixed ^ (mixed >> 31);
    }
}

/// Hash map keyed by packed states.
pub(crate) type StateMap<V> =
    std::collections::HashMap<PackedState, V, BuildHasherDefault<StateHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_stay_separate() {
        let s = PackedState(0)
            .with_model(0, 3, 5, 60)
            .with_model(2, 255, 1, MAX_SLOTS);
        assert_eq!((s.waiting(0), s.batch(0), s.remaining(0)), (3, 5, 60));
        assert_eq!((s.waiting(1), s.batch(1), s.remaining(1)), (0, 0, 0));
        assert_eq!(
            (s.waiting(2), s.batch(2), s.remaining(2)),
            (255, 1, MAX_SLOTS)
        );
        let t = PackedState(s.0 + 2 * PackedState::waiting_unit(1));
        assert_eq!(t.waiting(1), 2);
        let u = t.with_model(0, 0, 0, 0);
        assert_eq!((u.waiting(0), u.batch(0), u.remaining(0)), (0, 0, 0));
        assert_eq!(u.waiting(2), 255);
    }
}
