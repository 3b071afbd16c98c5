//! `tokenrouter generate --prompt P`: one completion streamed to stdout.

use std::io::Write;
use std::time::Instant;

use anyhow::Result;

use super::setup::Setup;
use super::GenerateArgs;

/// One prompt, streamed to stdout.
pub(super) fn run(args: &GenerateArgs, setup: Setup, prompt: &str) -> Result<()> {
    let prompt = setup.encode(args, prompt)?;
    let mut engine = setup.engine(args)?;
    engine.add(0, prompt.clone(), &setup.params)?;

    let mut stdout = std::io::stdout().lock();
    let start = Instant::now();
    let mut first_token = None;
    let mut generated = 0usize;
    while !engine.is_idle() {
        for ev in engine.step()? {
            first_token.get_or_insert_with(|| start.elapsed());
            generated += 1;
            write!(stdout, "{}", ev.text)?;
            stdout.flush()?;
        }
    }
    writeln!(stdout)?;
    let done = engine.take_finished();
    let total = start.elapsed().as_secs_f64();
    let ttft = first_token.map(|d| d.as_secs_f64()).unwrap_or(total);
    let decode_rate = if generated > 1 {
        (generated - 1) as f64 / (total - ttft).max(1e-9)
    } else {
        0.0
    };
    if args.print_ids {
        let ids = done.first().map(|c| c.tokens.clone()).unwrap_or_default();
        eprintln!("{}", serde_json::json!({"prompt_ids": prompt, "ids": ids}));
    }
    eprintln!(
        "prompt {} tokens, generated {generated} tokens, finish {:?}; first token {:.3}s, decode {decode_rate:.1} tokens/s",
        prompt.len(),
        done.first().map(|c| c.finish),
        ttft
    );
    Ok(())
}
