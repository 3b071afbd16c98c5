//! A routing threshold that can change while the group serves: the
//! `target_large_share` controller writes it, every member's policy reads
//! it on each step. One cell is shared by all members of an in-process group
//! so both sides of a two-way policy (R-Stitch) move together.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A shared `f64` threshold (lock-free; the bits of the float in an atomic).
#[derive(Debug, Clone)]
pub struct LiveThreshold(Arc<AtomicU64>);

impl LiveThreshold {
    /// A cell holding `value`.
    pub fn new(value: f64) -> Self {
        Self(Arc::new(AtomicU64::new(value.to_bits())))
    }

    /// The current value.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }

    /// Replaces the value.
    pub fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }
}

/// Which way a threshold moves the share of tokens written by the large
/// model(s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareDirection {
    /// Raising the threshold sends more tokens to the large model
    /// (CITER's confidence bar, Random's probability).
    RisesWithThreshold,
    /// Raising the threshold sends fewer tokens to the large model
    /// (R2R's probability bar, R-Stitch's and GlimpRouter's entropy bar).
    FallsWithThreshold,
}

/// A policy's steerable threshold: the cell, the direction and the range
/// the controller may move it in.
#[derive(Debug, Clone)]
pub struct ThresholdKnob {
    /// The live value.
    pub cell: LiveThreshold,
    /// How the large-model share responds.
    pub direction: ShareDirection,
    /// Smallest allowed value.
    pub min: f64,
    /// Largest allowed value.
    pub max: f64,
}

impl ThresholdKnob {
    /// A knob over [0, 1] (a probability or a normalized entropy).
    pub fn unit(cell: LiveThreshold, direction: ShareDirection) -> Self {
        Self {
            cell,
            direction,
            min: 0.0,
            max: 1.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_value() {
        let a = LiveThreshold::new(0.25);
        let b = a.clone();
        b.set(0.5);
        assert_eq!(a.get(), 0.5);
    }
}
