//! Kubernetes Events about a resource, published through a [`Recorder`].

use crds::TokenRouterDeployment;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::Resource;

/// The API server refuses an `events.k8s.io/v1` Event whose `note` is
/// longer than this many bytes (`validation.NoteLengthLimit`, 1 kB).
pub const NOTE_MAX_BYTES: usize = 1024;

/// What a cut note ends with.
const CUT_MARK: &str = " [truncated]";

/// `note` cut to at most [`NOTE_MAX_BYTES`] bytes on a character boundary,
/// marked as cut (the whole text is in the operator's log).
pub fn fit_note(note: String) -> String {
    if note.len() <= NOTE_MAX_BYTES {
        return note;
    }
    let mut end = NOTE_MAX_BYTES - CUT_MARK.len();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{CUT_MARK}", &note[..end])
}

/// Publishes one Event on `trd`. `action` names the loop that saw it
/// (`Reconcile`, `Tune`). A note over 1 kB is cut (the API server would
/// refuse the whole Event) and logged whole. An Event that cannot be
/// written is logged at warn and never fails the caller: Events are advisory.
pub async fn publish(
    recorder: &Recorder,
    trd: &TokenRouterDeployment,
    action: &str,
    kind: EventType,
    reason: &str,
    note: String,
) {
    if note.len() > NOTE_MAX_BYTES {
        tracing::info!(%reason, %note, "event note over 1 kB: published cut");
    }
    let event = Event {
        type_: kind,
        reason: reason.into(),
        note: Some(fit_note(note)),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &trd.object_ref(&())).await {
        tracing::warn!(error = %e, %reason, "cannot publish event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_to_the_api_servers_limit_on_a_char_boundary() {
        assert_eq!(fit_note("short".into()), "short");
        let exact = "x".repeat(NOTE_MAX_BYTES);
        assert_eq!(fit_note(exact.clone()), exact);
        // Two-byte characters across the cut: never half of one.
        let long = "é".repeat(NOTE_MAX_BYTES);
        let cut = fit_note(long);
        assert!(cut.len() <= NOTE_MAX_BYTES, "{}", cut.len());
        assert!(cut.ends_with(CUT_MARK) && cut.starts_with("éé"));
        let cut = fit_note(format!("a{}", "é".repeat(NOTE_MAX_BYTES)));
        assert!(cut.len() <= NOTE_MAX_BYTES);
    }
}
