//! `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`: the share of the GPU's SMs an MPS
//! client may use. The MPS server enforces it; we validate it, log it per
//! model and expose it so a misconfigured pod is visible, not silent.

use crate::error::EngineError;

/// The variable's name.
pub const MPS_THREAD_PERCENTAGE: &str = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";

/// Parses the variable's value: a number in `(0, 100]`.
pub fn parse_thread_percentage(value: &str) -> Result<f64, EngineError> {
    match value.trim().parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(p),
        _ => Err(EngineError::InvalidDevice(format!(
            "{MPS_THREAD_PERCENTAGE}={value:?}: expected a number in (0, 100]"
        ))),
    }
}

/// The percentage set in this process's environment, if any.
pub fn thread_percentage() -> Result<Option<f64>, EngineError> {
    match std::env::var(MPS_THREAD_PERCENTAGE) {
        Ok(v) => parse_thread_percentage(&v).map(Some),
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_percentages_and_names_the_variable_when_wrong() {
        assert_eq!(parse_thread_percentage("50").unwrap(), 50.0);
        assert_eq!(parse_thread_percentage(" 12.5 ").unwrap(), 12.5);
        for bad in ["0", "101", "-3", "half", ""] {
            let e = parse_thread_percentage(bad).unwrap_err().to_string();
            assert!(e.contains(MPS_THREAD_PERCENTAGE), "{e}");
        }
    }
}
