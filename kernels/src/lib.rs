//! Routing-signal and sampling kernels. CPU reference implementations live
//! here; CUDA versions come behind a feature and are checked against these.
