//! The `TokenRouterDeployment` custom resource types (filled in by the operator issue).
