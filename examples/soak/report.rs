//! The soak's page: its settings, each phase's table, and the result.

use super::{count, LeakRun, OverloadRun, Soak, OVERLOAD_TOKENS};

impl Soak {
    /// The page's opening paragraph: the settings of this run.
    pub(super) fn describe(&mut self) {
        let args = &self.args;
        self.page.para(&format!(
            "One process: the gateway in front of the simulated group of `{}` (sim backend: \
             fixed step latencies, no model compute, so the numbers measure admission, \
             scheduling and bookkeeping). Settings: capacity {} (max_inflight) + {} (max_queue), \
             overload {} s, unloaded reference {} s, leak run {} requests with {} clients at \
             once, seed {}, a KV pool of {} tokens per model (so that requests preempt each \
             other). The machine is a shared development host: other builds and tests \
             ran at the same time (see the load average), so rates are noisy; the invariants \
             are not.",
            args.config.file_name().map_or_else(
                || args.config.display().to_string(),
                |f| f.to_string_lossy().into()
            ),
            args.capacity,
            args.capacity,
            args.overload_seconds,
            args.unloaded_seconds,
            args.requests,
            args.leak_concurrency,
            args.seed,
            args.kv_tokens,
        ));
    }

    /// The overload section: the two phases side by side and the rate ratio.
    pub(super) fn write_overload(&mut self, run: &OverloadRun) -> anyhow::Result<()> {
        let within = super::targets::target("soak.overload_rate_deviation_max")?;
        let (args, capacity) = (&self.args, self.capacity);
        self.page.section(&format!(
            "Overload: 5x capacity for {} s",
            args.overload_seconds
        ));
        self.page.para(&format!(
            "Capacity = max_inflight {} + max_queue {} = {capacity}; closed-loop clients, \
             {OVERLOAD_TOKENS} tokens per request (`ignore_eos`); a refused client waits the \
             `Retry-After` seconds and tries again, as the OpenAI clients do.",
            args.capacity, args.capacity
        ));
        let yes_no = |ok: bool| if ok { "yes" } else { "NO" };
        let (unloaded, overload) = (&run.unloaded, &run.overload);
        self.page.table(
            &[
                "phase",
                "clients",
                "admitted, finished with every token",
                "429",
                "429 with Retry-After",
                "other outcomes",
                "admitted tokens/s",
                "load average after",
            ],
            &[
                vec![
                    format!("unloaded ({} s)", args.unloaded_seconds),
                    capacity.to_string(),
                    count(&unloaded.ok).to_string(),
                    count(&unloaded.rejected).to_string(),
                    "-".into(),
                    count(&unloaded.other).to_string(),
                    format!("{:.0}", run.unloaded_rate),
                    run.load_unloaded.clone(),
                ],
                vec![
                    format!("overload ({} s)", args.overload_seconds),
                    (5 * capacity).to_string(),
                    count(&overload.ok).to_string(),
                    count(&overload.rejected).to_string(),
                    yes_no(count(&overload.rejected_without_retry_after) == 0).into(),
                    count(&overload.other).to_string(),
                    format!("{:.0}", run.overload_rate),
                    run.load_overload.clone(),
                ],
            ],
        );
        let ratio = run.overload_rate / run.unloaded_rate;
        self.page.para(&format!(
            "Admitted throughput under overload: **{:.1}%** of the unloaded rate (target: \
             within {:.0}%, tools/bench/targets.yaml: {}). RSS: {} MiB before, {} MiB peak \
             during, {} MiB after (bound: +{} MiB).",
            ratio * 100.0,
            within * 100.0,
            if (ratio - 1.0).abs() <= within {
                "met"
            } else {
                "not met in this run"
            },
            run.rss_before / 1024,
            run.rss_peak / 1024,
            run.rss_after / 1024,
            args.rss_growth_mib
        ));
        Ok(())
    }

    /// The leak section: the mix, each model's pools and the process's counts.
    pub(super) fn write_leak(&mut self, run: &LeakRun) {
        let kinds = run.kinds;
        self.page
            .section(&format!("Leaks: {} requests", self.args.requests));
        self.page.para(&format!(
            "{} clients at once; mix: {} plain, {} with stop strings, {} streams the client \
             drops after the first chunk, {} cancelled by a 1-30 ms client timeout, {} invalid \
             (400 expected); a client refused with 429 retried after 10 ms ({} retries). \
             {} got the answer their kind expects. The internal invariant \
             check (KV pool consistency; request table and KV bookkeeping agree; home count) \
             ran {} times on every model during the run and once after it; the \
             gauges `tokenrouter_num_requests_{{running,waiting,pending}}`, \
             `tokenrouter_kv_cache_usage_perc` and the gateway's `vllm:num_requests_{{running,waiting}}` \
             were read after it.",
            self.args.leak_concurrency,
            kinds[0],
            kinds[1],
            kinds[2],
            kinds[3],
            kinds[4],
            run.retries,
            run.served,
            run.checks_during,
        ));
        let group = self.service.group();
        let rows: Vec<Vec<String>> = (0..group.names().len())
            .map(|m| {
                let s = group.stats(m as u16);
                vec![
                    group.names()[m].clone(),
                    format!("{} of {}", s.kv_available_blocks, s.kv_blocks),
                    s.kv_requests.to_string(),
                    format!("{}/{}/{}", s.running, s.waiting, s.pending),
                    s.preemptions.to_string(),
                ]
            })
            .collect();
        self.page.table(
            &[
                "model",
                "KV blocks free (or cached)",
                "requests holding KV",
                "running/waiting/pending",
                "preemptions",
            ],
            &rows,
        );
        self.page.para(&format!(
            "Gateway slots in use: {}; file descriptors {} before, {} after; \
             tokio tasks {} before, {} after; RSS {} MiB before, {} MiB after.",
            self.gw.in_flight(),
            run.fds.0,
            run.fds.1,
            run.tasks.0,
            run.tasks.1,
            run.rss.0 / 1024,
            run.rss.1 / 1024
        ));
    }

    /// The result section; the page printed and written to `--out`.
    pub(super) fn finish(&mut self) -> anyhow::Result<()> {
        self.page.section("Result");
        if self.failures.is_empty() {
            self.page.para("**Every invariant held.**");
        } else {
            let list: Vec<String> = self.failures.iter().map(|f| format!("- {f}")).collect();
            self.page
                .para(&format!("**FAILED**\n\n{}", list.join("\n")));
        }
        print!("{}", self.page.render());
        if let Some(out) = &self.args.out {
            self.page.write(out)?;
            eprintln!("wrote {}", out.display());
        }
        Ok(())
    }
}
