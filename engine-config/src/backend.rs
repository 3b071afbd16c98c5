//! Which `ModelRunner` implementation serves the models of a group.

use super::string_enum::string_enum;

string_enum! {
    /// The runner behind every model of the group.
    pub enum Backend as "backend" {
        /// Real forwards through libtorch (`path` must name a model directory).
        Tch => "tch",
        /// Sleeps for the configured step latency and emits seeded tokens.
        Sim => "sim",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for b in Backend::ALL {
            assert_eq!(b.as_str().parse::<Backend>().unwrap(), *b);
            assert_eq!(b.to_string(), b.as_str());
        }
        let err = "gpu".parse::<Backend>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown backend `gpu` (expected one of: tch, sim)"
        );
    }
}
