//! How the subservers of a group overlap their steps.

crate::string_enum! {
    /// The group's execution strategy. All four run the same subservers;
    /// they differ only in when a model's scheduler may start a step.
    pub enum ExecutionMode as "execution_mode" {
        /// Each model steps on its own, and waits until the delayed-batching
        /// threshold `B(model, n)` of runnable requests is reached (bounded by
        /// `max_batch_wait_ms`).
        AsyncDelayed => "async_delayed",
        /// Each model steps on its own as soon as anything is runnable.
        Async => "async",
        /// All models step together behind a barrier (the SGLang/vLLM shape).
        Lockstep => "lockstep",
        /// One model steps at a time (the official R2R/CITER shape).
        Serial => "serial",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in ExecutionMode::ALL {
            assert_eq!(m.as_str().parse::<ExecutionMode>().unwrap(), *m);
        }
        assert_eq!(ExecutionMode::AsyncDelayed.as_str(), "async_delayed");
        assert!("async-delayed".parse::<ExecutionMode>().is_err());
    }
}
