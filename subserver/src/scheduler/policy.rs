//! The policy hooks the scheduler calls; they live in the routing seam
//! ([`crate::routing`]), re-exported here for existing paths.

pub use policies::routing::{Dest, RouteItem, RoutingPolicy, StepView};
