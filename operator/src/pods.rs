//! What the resource's pods report that its StatefulSets and Deployment do
//! not: a container the kubelet cannot pull an image for stays `Waiting`
//! with `ErrImagePull`/`ImagePullBackOff`, and a pod the scheduler cannot
//! place stays `Pending` with `PodScheduled=False` (reason `Unschedulable`,
//! the scheduler's message: no node with the selector's labels, too few
//! `nvidia.com/gpu`, an untolerated taint). Their sets only show "not
//! ready". The TRD's Degraded condition names the image or the scheduler's
//! message, so a user sees why; nothing is deleted (the pods start once the
//! image or the node exists).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::Client;

/// Waiting reasons of a container whose image cannot be pulled.
const PULL_REASONS: &[&str] = &["ErrImagePull", "ImagePullBackOff", "InvalidImageName"];

/// Condition reason for pods whose image cannot be pulled.
pub const REASON: &str = "ImagePullBackOff";

/// One (reason, message) for every container of `pods` that cannot pull
/// its image: each image once, with the pods that wait for it and the
/// kubelet's message.
pub fn pull_problem(pods: &[Pod]) -> Option<(String, String)> {
    let mut images: Vec<(String, Vec<String>, String)> = Vec::new();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let statuses = pod.status.iter().flat_map(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
        });
        for c in statuses {
            let Some(waiting) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
                continue;
            };
            let reason = waiting.reason.as_deref().unwrap_or_default();
            if !PULL_REASONS.contains(&reason) {
                continue;
            }
            let why = waiting
                .message
                .clone()
                .unwrap_or_else(|| reason.to_string());
            match images.iter_mut().find(|(image, _, _)| *image == c.image) {
                Some((_, pods, _)) if !pods.contains(&name) => pods.push(name.clone()),
                Some(_) => {}
                None => images.push((c.image.clone(), vec![name.clone()], why)),
            }
        }
    }
    if images.is_empty() {
        return None;
    }
    let message = images
        .iter()
        .map(|(image, pods, why)| {
            format!(
                "image {image} cannot be pulled (pods {}): {why}",
                pods.join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some((REASON.to_string(), message))
}

/// Condition reason for pods the scheduler cannot place.
pub const UNSCHEDULABLE: &str = "Unschedulable";

/// One (reason, message) for the pods whose `PodScheduled` condition is
/// `False`: each scheduler message once, with the pods it is about (pods of
/// one StatefulSet usually share it: "0/3 nodes are available: 3
/// Insufficient nvidia.com/gpu").
pub fn unschedulable(pods: &[Pod]) -> Option<(String, String)> {
    let mut messages: Vec<(String, Vec<String>)> = Vec::new();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let conditions = pod
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten());
        for c in conditions {
            if c.type_ != "PodScheduled" || c.status != "False" {
                continue;
            }
            let why = c
                .message
                .clone()
                .or_else(|| c.reason.clone())
                .unwrap_or_else(|| UNSCHEDULABLE.to_string());
            match messages.iter_mut().find(|(m, _)| *m == why) {
                Some((_, pods)) => pods.push(name.clone()),
                None => messages.push((why, vec![name.clone()])),
            }
        }
    }
    if messages.is_empty() {
        return None;
    }
    let message = messages
        .iter()
        .map(|(why, pods)| format!("pods {} cannot be scheduled: {why}", pods.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    Some((UNSCHEDULABLE.to_string(), message))
}

/// [`pull_problem`] and [`unschedulable`] of the resource's pods (instance
/// label `instance` in `ns`); none when they cannot be listed (logged: the
/// next reconcile looks again).
pub async fn observe(client: &Client, ns: &str, instance: &str) -> Vec<(String, String)> {
    match list(client, ns, instance).await {
        Ok(pods) => pull_problem(&pods)
            .into_iter()
            .chain(unschedulable(&pods))
            .collect(),
        Err(e) => {
            tracing::warn!(%ns, %instance, error = %e, "cannot list the pods");
            Vec::new()
        }
    }
}

/// The pods of the resource (its instance label) in `ns`.
pub async fn list(client: &Client, ns: &str, instance: &str) -> kube::Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("{}={instance}", crate::names::INSTANCE));
    Ok(api.list(&lp).await?.items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateWaiting, ContainerStatus, PodCondition, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, image: &str, reason: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: "engine".into(),
                    image: image.into(),
                    state: Some(ContainerState {
                        waiting: reason.map(|r| ContainerStateWaiting {
                            reason: Some(r.into()),
                            message: Some(format!("Back-off pulling image \"{image}\"")),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn names_each_image_once_with_its_pods() {
        let pods = [
            pod("a-quick-0", "reg/x:missing", Some("ImagePullBackOff")),
            pod("a-reference-0", "reg/x:missing", Some("ErrImagePull")),
            pod("a-gateway-1", "reg/x:ok", None),
            pod("a-gateway-2", "reg/x:ok", Some("ContainerCreating")),
        ];
        let (reason, message) = pull_problem(&pods).unwrap();
        assert_eq!(reason, REASON);
        assert!(
            message.starts_with(
                "image reg/x:missing cannot be pulled (pods a-quick-0, a-reference-0)"
            ),
            "{message}"
        );
        assert!(!message.contains("reg/x:ok"), "{message}");
        assert_eq!(
            message.matches("reg/x:missing cannot").count(),
            1,
            "{message}"
        );
    }

    #[test]
    fn pods_that_pull_or_run_are_no_problem() {
        assert_eq!(pull_problem(&[]), None);
        assert_eq!(
            pull_problem(&[pod("p", "i", None), pod("q", "i", Some("CrashLoopBackOff"))]),
            None
        );
    }

    fn pending(name: &str, scheduled: &str, message: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".into(),
                    status: scheduled.into(),
                    reason: Some("Unschedulable".into()),
                    message: message.map(str::to_string),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn unschedulable_pods_are_named_with_the_schedulers_message() {
        let gpu = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.";
        let label = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.";
        let pods = [
            pending("a-quick-0", "False", Some(gpu)),
            pending("a-quick-1", "False", Some(gpu)),
            pending("a-reference-0", "False", Some(label)),
            pending("a-gateway-x", "True", None),
            pod("a-reference-1", "img", None),
        ];
        let (reason, message) = unschedulable(&pods).unwrap();
        assert_eq!(reason, UNSCHEDULABLE);
        assert_eq!(
            message,
            format!(
                "pods a-quick-0, a-quick-1 cannot be scheduled: {gpu}; \
                 pods a-reference-0 cannot be scheduled: {label}"
            )
        );
        // Without a message the condition's reason stands in.
        let (_, message) = unschedulable(&[pending("p", "False", None)]).unwrap();
        assert_eq!(message, "pods p cannot be scheduled: Unschedulable");
    }

    #[test]
    fn scheduled_pods_are_no_scheduling_problem() {
        assert_eq!(unschedulable(&[]), None);
        assert_eq!(
            unschedulable(&[pending("p", "True", None), pod("q", "i", None)]),
            None
        );
    }
}
