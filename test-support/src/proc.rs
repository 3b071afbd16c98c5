//! A child process with its output captured line by line, killed on drop.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::HANG;

/// What the reader threads report.
enum Event {
    Line,
    /// One of the two streams reached its end.
    Closed,
}

/// A spawned child whose stdout and stderr are read by two threads; every
/// line is kept (for failure messages) and announced to the waits.
pub struct Proc {
    name: String,
    child: Child,
    events: Receiver<Event>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    /// Lines of both streams in arrival order, not yet looked at by a wait.
    unseen: Arc<Mutex<Vec<String>>>,
    open: usize,
}

impl Proc {
    /// Spawns `cmd` with stdout and stderr captured (stdin closed); `name`
    /// appears in every failure message.
    pub fn spawn(name: &str, mut cmd: Command) -> Self {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {name} ({cmd:?}): {e}"));
        let (tx, events) = mpsc::channel();
        let unseen: Arc<Mutex<Vec<String>>> = Arc::default();
        let stdout = Arc::default();
        let stderr = Arc::default();
        read_lines(child.stdout.take().unwrap(), &stdout, &unseen, tx.clone());
        read_lines(child.stderr.take().unwrap(), &stderr, &unseen, tx);
        Self {
            name: name.to_string(),
            child,
            events,
            stdout,
            stderr,
            unseen,
            open: 2,
        }
    }

    /// Blocks until the child prints a line that `want` accepts (one no
    /// earlier wait took) and returns that line. Fails with the child's output if it exits first, or if
    /// [`HANG`] passes (a hang: `what` never happened).
    pub fn wait_line(&mut self, what: &str, mut want: impl FnMut(&str) -> bool) -> String {
        let deadline = Instant::now() + HANG;
        loop {
            {
                // Only the hit is taken: another wait may want the lines around it.
                let mut unseen = self.unseen.lock().unwrap();
                if let Some(i) = unseen.iter().position(|l| want(l)) {
                    return unseen.remove(i);
                }
            }
            if self.open == 0 {
                let status = self.child.wait().ok();
                panic!(
                    "{} exited ({status:?}) before {what}:\n{}",
                    self.name,
                    self.output()
                );
            }
            self.next_event(deadline, what);
        }
    }

    /// Waits for a line containing `marker` and returns the word after it
    /// (e.g. `"listening on "` gives the bound URL of a child started on port 0).
    pub fn wait_after(&mut self, marker: &str) -> String {
        let line = self.wait_line(&format!("its `{marker}` line"), |l| l.contains(marker));
        let rest = line.split(marker).nth(1).unwrap_or_default();
        rest.split(|c: char| c.is_whitespace() || c == ',')
            .next()
            .unwrap_or_default()
            .to_string()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success(), "kill -TERM {} failed", self.name);
    }

    /// Blocks until the child exits (both of its streams closed, then
    /// reaped); [`HANG`] only catches a child that never exits.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + HANG;
        while self.open > 0 {
            self.next_event(deadline, "its exit");
        }
        self.child.wait().unwrap()
    }

    /// Blocks for the next line or end of a stream (counted in `open`);
    /// past `deadline` it fails: `what` never happened.
    fn next_event(&mut self, deadline: Instant, what: &str) {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.events.recv_timeout(left) {
            Ok(Event::Line) => {}
            Ok(Event::Closed) => self.open -= 1,
            Err(RecvTimeoutError::Timeout) => panic!(
                "hang: {what} never happened in {HANG:?} ({}):\n{}",
                self.name,
                self.output()
            ),
            Err(RecvTimeoutError::Disconnected) => self.open = 0,
        }
    }

    /// Everything the child wrote to stdout so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Everything the child wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Both streams so far, for failure messages.
    pub fn output(&self) -> String {
        format!(
            "--- stdout ---\n{}--- stderr ---\n{}",
            self.stdout(),
            self.stderr()
        )
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("{} output:\n{}", self.name, self.output());
        }
    }
}

/// A thread that reads `from` line by line (colours removed) into `keep`
/// and `unseen`, then reports the end of the stream.
fn read_lines(
    from: impl Read + Send + 'static,
    keep: &Arc<Mutex<String>>,
    unseen: &Arc<Mutex<Vec<String>>>,
    tx: Sender<Event>,
) {
    let (keep, unseen) = (Arc::clone(keep), Arc::clone(unseen));
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            let line = strip_ansi(&line);
            let mut k = keep.lock().unwrap();
            k.push_str(&line);
            k.push('\n');
            drop(k);
            unseen.lock().unwrap().push(line);
            let _ = tx.send(Event::Line);
        }
        let _ = tx.send(Event::Closed);
    });
}

/// `line` without ANSI escape sequences (`ESC [ ... letter`): some binaries
/// colour their logs even into a pipe, and a wait matches `up=true`.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_are_removed() {
        let coloured = "\u{1b}[2m12:00\u{1b}[0m \u{1b}[3mup\u{1b}[0m\u{1b}[2m=\u{1b}[0mtrue";
        assert_eq!(strip_ansi(coloured), "12:00 up=true");
    }

    #[test]
    fn a_ready_line_is_waited_for_and_an_early_exit_fails_with_the_output() {
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "echo noise; echo 'x: listening on http://127.0.0.1:9' >&2",
        ]);
        let mut p = Proc::spawn("sh", cmd);
        assert_eq!(p.wait_after("listening on "), "http://127.0.0.1:9");
        assert!(p.wait_exit().success());
        assert_eq!(p.stdout(), "noise\n");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo bye"]);
        let mut p = Proc::spawn("sh", cmd);
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.wait_line("ready", |l| l == "ready")
        }))
        .unwrap_err();
        let msg = err.downcast_ref::<String>().unwrap();
        assert!(msg.contains("exited") && msg.contains("bye"), "{msg}");
    }
}
