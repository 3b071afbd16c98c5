//! `tokenrouter eval`: problems with reference answers against any OpenAI
//! endpoint. A math problem's answer is extracted (`\boxed{}` or the final
//! number) and checked with a normalizing checker; a short-answer item (one
//! with a `kind`) is graded by [`short`]. Per method the report gives
//! accuracy beside the large model's token share and the time taken.

pub mod answer;
pub mod check;
pub mod run;
pub mod short;

pub use answer::{extract_answer, extract_reference};
pub use check::equivalent;
