//! Sampling: parameters, samplers, stop conditions.
