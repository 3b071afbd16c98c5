//! Kubernetes Events about a resource, published through a [`Recorder`].

use crds::TokenRouterDeployment;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::Resource;

/// Publishes one Event on `trd`. `action` names the loop that saw it
/// (`Reconcile`, `Tune`). An Event that cannot be written is logged at
/// debug and never fails the caller: Events are advisory.
pub async fn publish(
    recorder: &Recorder,
    trd: &TokenRouterDeployment,
    action: &str,
    kind: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_: kind,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &trd.object_ref(&())).await {
        tracing::debug!(error = %e, "cannot publish event");
    }
}
