//! The Kubernetes controller for `TokenRouterDeployment` (the operator issue).
#![warn(missing_docs)]
