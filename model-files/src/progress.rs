//! Progress bars for long conversions (drawn on stderr, hidden when it is not a terminal).

use indicatif::{ProgressBar, ProgressStyle};

/// A byte-counting bar labelled `msg`.
pub(crate) fn bytes_bar(total: u64, msg: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template(
        "{msg} [{elapsed_precise}] [{wide_bar}] {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style.progress_chars("=> "));
    bar.set_message(msg.to_string());
    bar
}
