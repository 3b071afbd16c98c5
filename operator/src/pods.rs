//! What the resource's pods report that its StatefulSets and Deployment do
//! not: a container the kubelet cannot pull an image for stays `Waiting`
//! with `ErrImagePull`/`ImagePullBackOff`, and its set only shows "not
//! ready". The TRD's Degraded condition names the image, so a user sees
//! why; nothing is deleted (the pods start once the image exists).

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

/// [`pull_problem`] of the resource's pods (instance label `instance` in
/// `ns`); none when they cannot be listed (logged: the next reconcile
/// looks again).
pub async fn observe(client: &Client, ns: &str, instance: &str) -> Option<(String, String)> {
    match list(client, ns, instance).await {
        Ok(pods) => pull_problem(&pods),
        Err(e) => {
            tracing::warn!(%ns, %instance, error = %e, "cannot list the pods");
            None
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
        ContainerState, ContainerStateWaiting, ContainerStatus, PodStatus,
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
}
