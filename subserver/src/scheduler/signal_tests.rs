//! A routing signal that is misshaped at run time is counted and exported
//! (`tokenrouter_signal_failures_total`), not a silent route-to-small.

use std::time::{Duration, Instant};

use crate::config::LatencyModel;
use crate::metrics::{encode_text, SubserverMetrics};
use crate::runner::sim::SimRunner;
use crate::sampling::SamplingParams;
use crate::scheduler::client::StreamEvent;
use crate::scheduler::group::{Group, GroupSettings, MemberSpec};
use policies::handover::{HandoverBar, HandoverPolicy, HandoverSignal};
use policies::routing::signal_health::SignalError;
use policies::routing::StepView;
use policies::{LiveThreshold, ShareDirection};

/// One signal too many per step: every row "fires", but the step's rows
/// cannot be matched to signals.
struct Misshaped;

impl HandoverSignal for Misshaped {
    fn signals(&self, view: &StepView<'_>) -> Result<Vec<f32>, SignalError> {
        Ok(vec![0.9; view.items.len() + 1])
    }
}

fn fires(signal: f32, threshold: f64) -> bool {
    signal as f64 > threshold
}

#[test]
fn a_misshaped_signal_is_counted_and_exported_per_step() {
    let registry = prometheus::Registry::new();
    let metrics = SubserverMetrics::new(&registry).unwrap();
    let members = (0..2u16)
        .map(|m| {
            let policy: Box<dyn policies::routing::RoutingPolicy> = if m == 0 {
                let bar = HandoverBar::new(
                    "Misshaped",
                    LiveThreshold::new(0.5),
                    ShareDirection::FallsWithThreshold,
                    1,
                );
                Box::new(HandoverPolicy::at_entry("Misshaped", Misshaped, bar, fires))
            } else {
                Box::new(HandoverPolicy::<Misshaped>::guest("Misshaped", fires))
            };
            MemberSpec {
                name: ["small", "large"][m as usize].into(),
                runner: Box::new(
                    SimRunner::new(
                        "sim",
                        100,
                        vec![0],
                        Box::new(LatencyModel::linear(0.0, 0.0, 0.0).unwrap()),
                        4096,
                        16,
                        m as u64,
                    )
                    .unwrap(),
                ),
                policy,
                tokenizer: None,
                thresholds: vec![1],
            }
        })
        .collect();
    let g = Group::start_with_metrics(members, GroupSettings::default(), Some(&metrics));
    let max_tokens = 12;
    let (_, mut rx) = g.submit(vec![1, 2, 3], SamplingParams::greedy(max_tokens));
    let deadline = Instant::now() + Duration::from_secs(60);
    let usage = loop {
        assert!(Instant::now() < deadline, "the request hung");
        match rx.try_recv() {
            Ok(StreamEvent::Finished { usage, .. }) => break usage,
            Ok(StreamEvent::Failed(e)) => panic!("{e}"),
            _ => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    // Every step failed its signal, so the small model kept every token ...
    assert_eq!(usage.tokens_by_model, vec![max_tokens, 0]);
    // ... and each of those steps is counted, by reason, here and in Prometheus.
    let stats = g.stats(0);
    assert_eq!(
        stats.signal_failures,
        [0, max_tokens as u64, 0],
        "{stats:?}"
    );
    let text = encode_text(&registry).unwrap();
    let series = format!(
        "tokenrouter_signal_failures_total{{model=\"small\",policy=\"Misshaped\",reason=\"shape\"}} {max_tokens}\n"
    );
    assert!(text.contains(&series), "{series} not in\n{text}");
    assert_eq!(g.stats(1).signal_failures, [0, 0, 0]);
}
