//! The non-streaming answer: collect every choice, then one JSON body.

use warp::http::StatusCode;
use warp::reply::Response;

use crate::error::json_response;
use crate::openai::response::{self, FinalChoice};
use crate::openai::Endpoint;

use super::run::Run;

impl Run {
    /// Collects every choice and answers with one JSON body.
    pub async fn collect(mut self) -> Response {
        while let Some((i, ev)) = self.next_event().await {
            if let Err(e) = self.apply(i, ev) {
                self.gw.count_error(&e);
                return e.response();
            }
        }
        self.record_success();
        let choices = (0..self.choices.len())
            .map(|i| self.final_choice(i))
            .collect();
        let body = response::completion_body(&self.head(), choices, self.usage_json());
        json_response(StatusCode::OK, &body)
    }

    fn final_choice(&self, i: usize) -> serde_json::Value {
        let c = &self.choices[i];
        let p = &self.prepared;
        let mut text = String::new();
        if p.endpoint == Endpoint::Completions && p.echo {
            let prompt = &p.prompts[i / p.n.max(1)];
            text.push_str(prompt.text.as_deref().unwrap_or(""));
        }
        text.push_str(&c.text);
        let logprobs = response::logprobs_field(p.endpoint, p.logprobs.is_some(), &c.logprobs);
        let names: Vec<String> = c
            .writers
            .iter()
            .map(|&w| self.catalog().member(w))
            .collect();
        let sources: Vec<&str> = names.iter().map(String::as_str).collect();
        response::final_choice(
            p.endpoint,
            FinalChoice {
                index: i,
                text: &text,
                logprobs: &logprobs,
                finish: c.finish,
                sources: p.sources.then_some(sources.as_slice()),
            },
        )
    }
}
