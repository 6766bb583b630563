//! `swarm-operator check`: whether an installed operator is working, for the chart's `helm
//! test` hook and for a user after an install: the API server serves SwarmPools (the CRD is
//! installed and established), at least one of the operator's pods is Ready (its `/readyz`
//! probe passes) and, with leader election, a Ready pod holds the Lease. What it reads is
//! judged by [`judge`], which names what is wrong and what to look at.

use std::time::Duration;

use anyhow::{Result, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};

use crate::api::crd::SwarmPool;
use crate::runtime::leader::identity_pod;

/// Arguments of `swarm-operator check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The operator's namespace: its pods, its Lease, and where SwarmPools are listed.
    #[arg(long, value_name = "NS")]
    pub namespace: String,
    /// Label selector of the operator's pods.
    #[arg(
        long,
        value_name = "SELECTOR",
        default_value = "app.kubernetes.io/name=swarm-operator"
    )]
    pub selector: String,
    /// The leader-election Lease a Ready pod must hold; without it, no Lease is checked (a
    /// single replica without --leader-elect).
    #[arg(long, value_name = "NAME")]
    pub lease: Option<String>,
    /// The Lease's namespace [default: --namespace].
    #[arg(long, value_name = "NS")]
    pub lease_namespace: Option<String>,
    /// Seconds to wait for a good verdict before failing with the last one's problems.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub timeout: u64,
}

/// What `check` reads, then judges.
#[derive(Debug)]
pub struct Observed {
    /// Listing SwarmPools in the namespace: how many, or the API server's answer.
    pub pools: std::result::Result<usize, String>,
    /// The operator's pods: name and whether it is Ready.
    pub pods: Vec<(String, bool)>,
    /// The leader-election Lease's holder, when a Lease is checked: `Err` when it is missing.
    pub leader: Option<std::result::Result<Option<String>, String>>,
}

/// The verdict on `observed`: one line saying what works, or every problem found.
pub fn judge(observed: &Observed, namespace: &str, selector: &str) -> Result<String, Vec<String>> {
    let mut problems = Vec::new();
    let mut found = Vec::new();
    match &observed.pools {
        Ok(count) => found.push(format!("SwarmPools served ({count} in {namespace})")),
        Err(answer) => problems.push(format!(
            "the API server does not serve SwarmPools ({answer}): install the CRD \
             (crds/swarmpool.yaml, or the chart with crds.enabled=true)"
        )),
    }
    let ready: Vec<&str> = observed
        .pods
        .iter()
        .filter(|(_, ready)| *ready)
        .map(|(name, _)| name.as_str())
        .collect();
    if ready.is_empty() {
        let pods: Vec<&str> = observed
            .pods
            .iter()
            .map(|(name, _)| name.as_str())
            .collect();
        problems.push(format!(
            "no operator pod is Ready in {namespace} (selector {selector}; pods: {pods:?}): \
             see `kubectl -n {namespace} describe pods -l {selector}` and their logs"
        ));
    } else {
        found.push(format!(
            "{} of {} operator pods Ready",
            ready.len(),
            observed.pods.len()
        ));
    }
    match &observed.leader {
        None => {}
        Some(Ok(Some(holder))) if ready.contains(&identity_pod(holder)) => {
            found.push(format!("{} leads", identity_pod(holder)));
        }
        Some(Ok(holder)) => problems.push(format!(
            "the leader-election Lease is held by {holder:?}, not by a Ready operator pod: \
             a standby takes it within the lease duration; see the operator's logs"
        )),
        Some(Err(answer)) => problems.push(format!(
            "no leader-election Lease ({answer}): is the operator running with --leader-elect \
             and --leader-elect-namespace {namespace}?"
        )),
    }
    if problems.is_empty() {
        Ok(found.join("; "))
    } else {
        Err(problems)
    }
}

/// Reads what [`judge`] needs, once.
pub async fn observe(client: &Client, args: &CheckArgs) -> Result<Observed> {
    let (namespace, selector) = (args.namespace.as_str(), args.selector.as_str());
    let pools = Api::<SwarmPool>::namespaced(client.clone(), namespace)
        .list_metadata(&ListParams::default().limit(500))
        .await
        .map(|list| list.items.len())
        .map_err(|e| e.to_string());
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .into_iter()
        .map(|pod| {
            (
                pod.metadata.name.clone().unwrap_or_default(),
                is_ready(&pod),
            )
        })
        .collect();
    let lease_namespace = args.lease_namespace.as_deref().unwrap_or(namespace);
    let leader = match &args.lease {
        None => None,
        Some(name) => Some(
            Api::<Lease>::namespaced(client.clone(), lease_namespace)
                .get(name)
                .await
                .map(|lease| lease.spec.and_then(|spec| spec.holder_identity))
                .map_err(|e| e.to_string()),
        ),
    };
    Ok(Observed {
        pools,
        pods,
        leader,
    })
}

/// Observes and judges until the verdict is good or `within` has passed (an install that was
/// just made may still be electing its leader); the last verdict's problems are the error.
pub async fn check(client: &Client, args: &CheckArgs) -> Result<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout);
    loop {
        let observed = observe(client, args).await?;
        match judge(&observed, &args.namespace, &args.selector) {
            Ok(summary) => return Ok(summary),
            Err(problems) if tokio::time::Instant::now() >= deadline => {
                bail!("{}", problems.join("; "))
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(2)).await,
        }
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(pods: &[(&str, bool)], leader: Option<Option<&str>>) -> Observed {
        Observed {
            pools: Ok(1),
            pods: pods.iter().map(|(n, r)| ((*n).to_owned(), *r)).collect(),
            leader: leader.map(|holder| Ok(holder.map(str::to_owned))),
        }
    }

    #[test]
    fn a_served_crd_and_a_ready_leader_pass() {
        let verdict = judge(
            &observed(&[("op-a", true), ("op-b", false)], Some(Some("op-a_x7k2p"))),
            "swarm-system",
            "app=op",
        );
        assert_eq!(
            verdict.as_deref(),
            Ok("SwarmPools served (1 in swarm-system); 1 of 2 operator pods Ready; op-a leads")
        );
    }

    #[test]
    fn each_problem_is_named_with_what_to_do() {
        let mut seen = observed(&[("op-a", false)], Some(Some("op-b_x7k2p")));
        seen.pools = Err("404 page not found".to_owned());
        let problems = judge(&seen, "ns", "app=op").unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("crds.enabled=true"), "{problems:?}");
        assert!(
            problems[1].contains("describe pods -l app=op"),
            "{problems:?}"
        );
        assert!(problems[2].contains("Some(\"op-b_x7k2p\")"), "{problems:?}");
    }

    #[test]
    fn a_lease_held_by_no_one_or_missing_fails_and_no_lease_asked_passes() {
        let unheld = observed(&[("op-a", true)], Some(None));
        assert!(judge(&unheld, "ns", "s").is_err());
        let mut missing = observed(&[("op-a", true)], None);
        missing.leader = Some(Err("404".to_owned()));
        let problems = judge(&missing, "ns", "s").unwrap_err();
        assert!(problems[0].contains("--leader-elect"), "{problems:?}");
        let single = observed(&[("op-a", true)], None);
        assert!(judge(&single, "ns", "s").is_ok());
    }
}
