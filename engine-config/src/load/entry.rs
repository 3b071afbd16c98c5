//! The public loaders: `EngineConfig::from_yaml_str`, `from_file`,
//! `embedded_default` and `embedded_groups`.

use std::path::{Path, PathBuf};

use super::parse;
use crate::engine_config::EngineConfig;
use crate::error::ConfigError;

/// The text of `config/default.yaml`, built into the binary.
pub const DEFAULT_CONFIG_YAML: &str = include_str!("../../../config/default.yaml");

/// The text of `config/fast.yaml`, built into the binary.
pub const FAST_CONFIG_YAML: &str = include_str!("../../../config/fast.yaml");

/// The text of `config/coder.yaml`, built into the binary.
pub const CODER_CONFIG_YAML: &str = include_str!("../../../config/coder.yaml");

/// The groups served when no file is given, in order: `default`, `fast`,
/// `coder`.
pub const EMBEDDED_GROUPS_YAML: [&str; 3] =
    [DEFAULT_CONFIG_YAML, FAST_CONFIG_YAML, CODER_CONFIG_YAML];

impl EngineConfig {
    /// Parses YAML text. Relative paths resolve against `base_dir`, and
    /// `${NAME}` / `${NAME:-fallback}` in path values read the process
    /// environment.
    pub fn from_yaml_str(text: &str, base_dir: &Path) -> Result<Self, ConfigError> {
        parse(text, base_dir, &|name| std::env::var(name).ok())
    }

    /// Reads and parses a file; relative paths resolve against its directory.
    /// Errors name the file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let base_dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let mut config =
            Self::from_yaml_str(&text, base_dir).map_err(|e| e.in_file(path.to_path_buf()))?;
        config.source = Some(path.to_path_buf());
        tracing::debug!(file = %path.display(), models = config.models.len(), "loaded config");
        Ok(config)
    }

    /// The configuration served when no file is given: `config/default.yaml`
    /// (the SmolLM2 pair under `$TOKENROUTER_CACHE/models`, R-Stitch),
    /// with `TOKENROUTER_CACHE` defaulting to `.cache` in the current
    /// directory.
    pub fn embedded_default() -> Result<Self, ConfigError> {
        let cwd = std::env::current_dir().map_err(|source| ConfigError::Io {
            path: PathBuf::from("."),
            source,
        })?;
        embedded_in(DEFAULT_CONFIG_YAML, &cwd, &|name| std::env::var(name).ok())
    }

    /// Every group served when no file is given ([`EMBEDDED_GROUPS_YAML`]:
    /// `config/default.yaml`, `config/fast.yaml`, `config/coder.yaml`), paths resolved as
    /// [`Self::embedded_default`] resolves them.
    pub fn embedded_groups() -> Result<Vec<Self>, ConfigError> {
        let cwd = std::env::current_dir().map_err(|source| ConfigError::Io {
            path: PathBuf::from("."),
            source,
        })?;
        EMBEDDED_GROUPS_YAML
            .iter()
            .map(|text| embedded_in(text, &cwd, &|name| std::env::var(name).ok()))
            .collect()
    }
}

/// `embedded_default` with an explicit working directory and environment.
#[cfg(test)]
fn embedded_default_in(
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<EngineConfig, ConfigError> {
    embedded_in(DEFAULT_CONFIG_YAML, cwd, env)
}

/// A built-in config with an explicit working directory and environment.
/// The file's `${TOKENROUTER_CACHE:-../.cache}` fallback is right for the
/// file in `config/`; built in, the fallback is `<cwd>/.cache` instead.
fn embedded_in(
    text: &str,
    cwd: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<EngineConfig, ConfigError> {
    let cache = env("TOKENROUTER_CACHE")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| cwd.join(".cache").to_string_lossy().into_owned());
    let lookup = move |name: &str| {
        if name == "TOKENROUTER_CACHE" {
            Some(cache.clone())
        } else {
            env(name)
        }
    };
    parse(text, cwd, &lookup)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        Backend, DeviceSpec, ExecutionMode, LatencyModel, PolicyName, TcpTransport, TransportConfig,
    };

    /// The repository's `config/` folder.
    fn examples_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../config")
    }

    fn example(name: &str) -> EngineConfig {
        EngineConfig::from_file(&examples_dir().join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    #[test]
    fn every_example_file_loads() {
        let mut loaded = Vec::new();
        for entry in std::fs::read_dir(examples_dir()).unwrap() {
            let path = entry.unwrap().path();
            if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            ) {
                let config = EngineConfig::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(config.source(), Some(path.as_path()));
                loaded.push(path.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
        loaded.sort();
        let expected = [
            "citer.yaml",
            "co-llm.yaml",
            "default.yaml",
            "fast.yaml",
            "glimprouter.yaml",
            "me.yaml",
            "query-level.yaml",
            "r-stitch.yaml",
            "r2r.yaml",
            "random.yaml",
            "sim-r2r.yaml",
            "tcp-split.yaml",
        ];
        for name in expected {
            assert!(
                loaded.iter().any(|l| l == name),
                "config/{name} is missing (found {loaded:?})"
            );
        }
    }

    #[test]
    fn examples_say_what_their_names_say() {
        let kw = |c: &EngineConfig, k: &str| c.policy().kwargs.get(k).cloned();
        let policy = |c: &EngineConfig| c.policy().name;
        let cases = [
            ("r2r.yaml", "R2R"),
            ("citer.yaml", "CITER"),
            ("co-llm.yaml", "CoLLM"),
            ("r-stitch.yaml", "RStitch"),
            ("me.yaml", "ME"),
            ("glimprouter.yaml", "GlimpRouter"),
            ("query-level.yaml", "QueryLevel"),
            ("random.yaml", "Random"),
            ("sim-r2r.yaml", "Bernoulli"),
            ("tcp-split.yaml", "RStitch"),
            ("default.yaml", "RStitch"),
            ("fast.yaml", "RStitch"),
        ];
        for (file, name) in cases {
            assert_eq!(
                policy(&example(file)),
                PolicyName::parse(name).unwrap(),
                "{file}"
            );
        }
        let r2r = example("r2r.yaml");
        assert!(kw(&r2r, "router_path").is_some());
        assert_eq!(r2r.model_names(), ["quick", "reference"]);
        let router = r2r.resolve_path(kw(&r2r, "router_path").unwrap().as_str().unwrap());
        assert!(router.starts_with(examples_dir()), "{}", router.display());
        assert_eq!(
            kw(&example("citer.yaml"), "threshold"),
            Some(serde_json::json!(0.98))
        );
        assert_eq!(
            kw(&example("co-llm.yaml"), "threshold"),
            Some(serde_json::json!(0.15))
        );
        assert_eq!(
            kw(&example("r-stitch.yaml"), "threshold"),
            Some(serde_json::json!(0.03))
        );
        let me = example("me.yaml");
        assert_eq!(me.models().len(), 3);
        assert_eq!(kw(&me, "weights"), Some(serde_json::json!([0.5, 0.3, 0.2])));
        let random = example("random.yaml");
        assert_eq!(kw(&random, "probability"), Some(serde_json::json!(0.2)));
        assert_eq!(kw(&random, "seed"), Some(serde_json::json!(0)));

        let sim = example("sim-r2r.yaml");
        assert_eq!(sim.backend(), Backend::Sim);
        assert_eq!(kw(&sim, "probability"), Some(serde_json::json!(0.35)));
        let step = |i: usize| {
            sim.model(i)
                .unwrap()
                .sim
                .as_ref()
                .unwrap()
                .latency_ms
                .step_ms(1, 1)
        };
        assert_eq!((step(0), step(1)), (6.0, 27.9));
        assert_eq!(sim.thresholds().for_model(1), Some(&[1, 2, 2, 3][..]));
        assert_eq!(
            sim.model(1).unwrap().sim.as_ref().unwrap().latency_ms,
            LatencyModel::linear(27.9, 0.0, 0.0).unwrap()
        );

        let tcp = example("tcp-split.yaml");
        let expected = TcpTransport {
            addresses: vec!["127.0.0.1:31001".into(), "127.0.0.1:31002".into()],
            connect_timeout_ms: 2000,
            peer_timeout_ms: 10_000,
        };
        assert_eq!(tcp.transport(), &TransportConfig::Tcp(expected));
        // Example paths point at the repository's cache, next to config/.
        let quick = tcp.model(0).unwrap().path.clone().unwrap();
        assert_eq!(
            quick,
            examples_dir().join("../.cache/models/smollm2-135m-l12")
        );
    }

    #[test]
    fn embedded_default_is_the_smollm2_pair() {
        let no_env = |_: &str| None;
        let c = embedded_default_in(Path::new("/work/repo"), &no_env).unwrap();
        assert_eq!(c.model_names(), ["quick", "reference"]);
        assert_eq!(c.entry_index(), 0);
        let paths: Vec<_> = c.models().iter().map(|m| m.path.clone().unwrap()).collect();
        assert_eq!(
            paths[0],
            Path::new("/work/repo/.cache/models/smollm2-135m-l12-healed")
        );
        assert_eq!(paths[1], Path::new("/work/repo/.cache/models/smollm2-135m"));
        assert_eq!(c.policy().name.as_str(), "RStitch");
        // R-Stitch at a fixed τ: no online steering, so seeds replay.
        assert_eq!(
            c.policy().kwargs.get("threshold"),
            Some(&serde_json::json!(0.1))
        );
        assert_eq!(c.target_large_share(), None);
        assert_eq!(c.backend(), Backend::Tch);
        assert_eq!(c.device(), DeviceSpec::Cpu);
        assert_eq!(c.execution_mode(), ExecutionMode::AsyncDelayed);
        assert_eq!(c.source(), None);

        let cache_env =
            |name: &str| (name == "TOKENROUTER_CACHE").then(|| "/srv/cache".to_string());
        let c = embedded_default_in(Path::new("/work/repo"), &cache_env).unwrap();
        assert_eq!(
            c.model(1).unwrap().path.as_deref(),
            Some(Path::new("/srv/cache/models/smollm2-135m"))
        );

        // The public entry point reads the real environment and directory.
        let real = EngineConfig::embedded_default().unwrap();
        assert_eq!(real.model_names(), ["quick", "reference"]);
        // Loaded from its file, default.yaml describes the same group.
        let from_file = example("default.yaml");
        assert_eq!(from_file.policy().name, real.policy().name);
        assert_eq!(from_file.policy().kwargs, real.policy().kwargs);
        assert_eq!(from_file.target_large_share(), real.target_large_share());
        assert_eq!(from_file.thresholds(), real.thresholds());
    }

    #[test]
    fn embedded_groups_are_default_fast_and_coder_with_the_cards_sampling() {
        let groups = EngineConfig::embedded_groups().unwrap();
        let names: Vec<_> = groups
            .iter()
            .map(|g| g.gateway().served_model_name.as_str())
            .collect();
        assert_eq!(names, ["default", "fast", "coder"]);
        // coder: the Qwen2.5-Coder pair, the 0.5B writing, as its file says.
        let coder = &groups[2];
        assert_eq!(
            coder.model_names(),
            ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
        );
        assert_eq!(coder.entry_index(), 0);
        let from_file = example("coder.yaml");
        assert_eq!(from_file.policy(), coder.policy());
        assert_eq!(from_file.gateway(), coder.gateway());
        assert!(coder
            .model(1)
            .unwrap()
            .path
            .as_ref()
            .unwrap()
            .ends_with("models/qwen2.5-coder-1.5b"));
        let card = crate::GenerationDefaults {
            temperature: Some(0.2),
            top_p: Some(0.9),
            ..Default::default()
        };
        for (g, file) in groups.iter().zip(["default.yaml", "fast.yaml"]) {
            assert_eq!(g.generation_override(), card, "{file}");
            // Loaded from its file, each describes the same group.
            let from_file = example(file);
            assert_eq!(from_file.policy(), g.policy(), "{file}");
            assert_eq!(from_file.gateway(), g.gateway(), "{file}");
        }
        // fast is today's pair: the healed 12-layer exit and the full model.
        let fast = &groups[1];
        assert_eq!(fast.model_names(), ["quick", "reference"]);
        assert_eq!(
            fast.policy().kwargs.get("threshold"),
            Some(&serde_json::json!(0.4))
        );
        assert!(fast
            .model(0)
            .unwrap()
            .path
            .as_ref()
            .unwrap()
            .ends_with("models/smollm2-135m-l12-healed"));
    }

    #[test]
    fn file_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.yaml");
        let err = EngineConfig::from_file(&missing).unwrap_err();
        assert_eq!(err.error_type(), "io");
        assert!(err.to_string().contains("nope.yaml"), "{err}");

        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, "model:\n  quick: {path: q, colour: red}\n").unwrap();
        let err = EngineConfig::from_file(&bad).unwrap_err();
        assert_eq!(err.error_type(), "schema");
        assert_eq!(err.key(), Some("model.quick.colour"));
        assert!(
            err.to_string()
                .starts_with(&format!("{}: model.quick.colour: ", bad.display())),
            "{err}"
        );

        // The message docs/config.md shows.
        let doc = dir.path().join("doc.yaml");
        std::fs::write(&doc, "model:\n  quick:\n    colour: red\n").unwrap();
        assert_eq!(
            EngineConfig::from_file(&doc).unwrap_err().to_string(),
            format!(
                "{}: model.quick.colour: unknown field `colour`, expected one of `path`, \
                 `model_path`, `port`, `tp_size`, `scheduler_class`, `scheduler_kwargs`, \
                 `delayed_batching_threshold`, `device`, `dtype`, `mem_fraction_static`, \
                 `kv_cache_tokens`, `sim` (at line 3, column 5)",
                doc.display()
            )
        );

        let good = dir.path().join("good.yaml");
        std::fs::write(
            &good,
            "model: {a: {path: m}}\nsystem: {entry_model: a}\nscheduler_class: R2R\n",
        )
        .unwrap();
        let c = EngineConfig::from_file(&good).unwrap();
        assert_eq!(
            c.model(0).unwrap().path.as_deref(),
            Some(dir.path().join("m").as_path())
        );
        assert_eq!(c.base_dir(), dir.path());
    }

    #[test]
    fn thresholds_can_be_retuned_in_place() {
        let mut c = example("sim-r2r.yaml");
        c.thresholds_mut().replace_model(1, vec![1, 3]).unwrap();
        assert_eq!(c.thresholds().get(1, 5), 3);
        assert!(c.thresholds_mut().replace(vec![vec![1]]).is_err());
    }
}
