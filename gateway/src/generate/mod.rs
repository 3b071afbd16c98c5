//! Running a checked request on a group: one engine request per choice,
//! their events merged ([`run`]), answered as one JSON body ([`collect`])
//! or as SSE chunks ([`stream`]); the objects themselves come from
//! [`crate::openai::response`]. The engine requests live in the response:
//! when the client goes away the response (and with it every
//! [`Submission`](crate::backend::Submission)) is dropped, which cancels
//! them in every subserver.

mod collect;
mod run;
mod stream;

pub use run::Run;
