//! `tokenrouter eval`: math word problems against any OpenAI endpoint.
//! Each answer is extracted (`\boxed{}` or the final number) and checked
//! against the reference with a normalizing checker; per method the report
//! gives accuracy beside the large model's token share and the time taken.

pub mod answer;
pub mod check;
pub mod run;

pub use answer::{extract_answer, extract_reference};
pub use check::equivalent;
