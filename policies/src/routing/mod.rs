//! The routing seam: what a routing policy is ([`RoutingPolicy`] and the
//! [`StepView`] it reads, the [`Dest`] it returns) and the threshold a
//! policy exposes for `target_large_share` to steer ([`ThresholdKnob`],
//! [`LiveThreshold`], [`ShareDirection`]), and the per-step signal failures
//! a policy reports ([`signal_health`]).
//!
//! This is a leaf: the scheduler calls through it, the policies implement
//! it, and it imports neither, so neither owns the other.

mod hooks;
pub mod signal_health;
mod threshold;

pub use hooks::{Dest, RouteItem, RoutingPolicy, StepView};
pub use threshold::{LiveThreshold, ShareDirection, ThresholdKnob};
