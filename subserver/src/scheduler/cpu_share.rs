//! The CPU cores of an in-process group, handed out step by step.
//!
//! The models of a group on the CPU step on their own threads. A fixed split
//! (`cores / models` intra-op threads each) leaves half the machine idle when
//! they take turns, as they do at low concurrency: the entry steps, hands a
//! token over and sleeps while the other model steps. Every core for each
//! oversubscribes the machine when both step. So a step takes every core
//! while the other models sleep on their inboxes (they cannot step before
//! something wakes them), and its fair share while any of them is awake.
//! Deciding by who is awake rather than by who is inside a forward keeps the
//! split steady under load: a model between two steps still counts, so two
//! busy models do not trade every core back and forth step by step (each
//! trade starts and ends a pool of OpenMP workers).

/// How one group's cores are split between its models' steps.
#[derive(Debug, Clone, Copy)]
pub struct CpuShare {
    cores: usize,
    models: usize,
}

impl CpuShare {
    /// `cores` CPU cores for a group of `models` models (each at least one).
    pub fn new(cores: usize, models: usize) -> Self {
        Self {
            cores: cores.max(1),
            models: models.max(1),
        }
    }

    /// Intra-op threads for a step while `others_awake` other models are awake.
    pub fn threads(&self, others_awake: usize) -> usize {
        if others_awake == 0 {
            self.cores
        } else {
            (self.cores / self.models).max(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_alone_gets_every_core_and_busy_models_their_share() {
        let pair = CpuShare::new(2, 2);
        assert_eq!(pair.threads(0), 2, "the other model sleeps: every core");
        assert_eq!(pair.threads(1), 1, "both awake: half each");
        let three = CpuShare::new(16, 3);
        assert_eq!(three.threads(0), 16);
        assert_eq!(three.threads(1), 5);
        assert_eq!(three.threads(2), 5);
        assert_eq!(CpuShare::new(1, 2).threads(1), 1, "never below one thread");
        assert_eq!(CpuShare::new(0, 0).threads(0), 1);
    }
}
