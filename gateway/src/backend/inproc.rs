//! A group running in this process (`tokenrouter serve`).

use std::sync::Arc;

use protocol::client::SubmitOptions;
use protocol::sampling::SamplingParams;
use subserver::scheduler::group::Group;

use super::{Backend, Submission};

/// The in-process transport: submits straight into the entry scheduler's inbox.
pub struct InProcBackend {
    group: Arc<Group>,
    id: String,
}

impl InProcBackend {
    /// Fronts `group`.
    pub fn new(group: Arc<Group>, id: impl Into<String>) -> Self {
        Self {
            group,
            id: id.into(),
        }
    }
}

impl Backend for InProcBackend {
    fn id(&self) -> &str {
        &self.id
    }

    fn submit(&self, prompt: Vec<u32>, params: SamplingParams, pin: Option<u16>) -> Submission {
        let (rid, events) = self
            .group
            .submit_with(prompt, params, SubmitOptions { pin });
        let group = self.group.clone();
        Submission::new(events, Box::new(move || group.cancel(rid)))
    }

    fn healthy(&self) -> bool {
        (0..self.group.names().len()).all(|m| self.group.is_alive(m as u16))
    }

    fn active(&self) -> usize {
        self.group.active()
    }
}
