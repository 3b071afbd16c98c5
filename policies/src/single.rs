//! No routing: the model keeps every token (single-model serving, the
//! Std. Serving baseline's per-model servers, query-level routing's members).

use crate::routing::{Dest, RoutingPolicy, StepView};

/// Always stays.
pub struct SinglePolicy;

impl RoutingPolicy for SinglePolicy {
    fn name(&self) -> &'static str {
        "Single"
    }

    fn route(&mut self, view: &StepView<'_>) -> Vec<Dest> {
        vec![Dest::Stay; view.items.len()]
    }
}
