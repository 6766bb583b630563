//! The ConfigMaps pools read jobs from (`spec.jobsFrom`): looked up for a reconcile, and
//! mapped back to the pools that read them when they change.
//!
//! Why a watch of labelled ConfigMaps: a pool of 100,000 jobs reads megabytes of sources on
//! every reconcile, so they must come from a cache, not a GET each time; and the operator must
//! not cache every ConfigMap of the cluster to find the few that are sources. The label
//! `swarm.io/jobs-source` selects exactly those server-side (the pools' own ConfigMaps are in
//! another watch, by `swarm.io/pool`: label selectors cannot OR the two). A source the cache
//! does not hold is read with one GET, to tell a missing ConfigMap from an unlabelled one (each
//! gets its own condition and fix) and to see a labelled one the watch has not delivered yet.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;

use super::Context;
use crate::Error;
use crate::api::crd::SwarmPool;
use crate::state::jobs_source::{self, Found};

/// A source as the lookup found it.
pub(super) enum Source {
    ConfigMap(Arc<ConfigMap>),
    Missing,
    Unlabelled,
    Unreadable(String),
}

impl Source {
    pub(super) fn found(&self) -> Found<'_> {
        match self {
            Source::ConfigMap(cm) => Found::ConfigMap(cm),
            Source::Missing => Found::Missing,
            Source::Unlabelled => Found::Unlabelled,
            Source::Unreadable(why) => Found::Unreadable(why),
        }
    }
}

/// The sources `pool` names, by ConfigMap name: from the cache, else from the API server. A
/// refusal (401, 403) is a source that cannot be read, reported on the pool; a failure
/// to reach the API server is an error, retried with the backoff.
pub(super) async fn look_up(
    ctx: &Context,
    pool: &SwarmPool,
    namespace: &str,
) -> Result<BTreeMap<String, Source>, Error> {
    let mut found = BTreeMap::new();
    for source in &pool.spec.jobs_from {
        let name = &source.config_map_ref.name;
        if found.contains_key(name) {
            continue;
        }
        let cached = ctx
            .jobs_sources
            .get(&ObjectRef::new(name).within(namespace));
        let source = match cached {
            Some(cm) => Source::ConfigMap(cm),
            None => get(ctx, namespace, name).await?,
        };
        found.insert(name.clone(), source);
    }
    Ok(found)
}

async fn get(ctx: &Context, namespace: &str, name: &str) -> Result<Source, Error> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
    match api.get_opt(name).await {
        Ok(None) => Ok(Source::Missing),
        Ok(Some(cm)) if !jobs_source::is_labelled(&cm) => Ok(Source::Unlabelled),
        Ok(Some(mut cm)) => {
            crate::state::trim::jobs_source(&mut cm);
            Ok(Source::ConfigMap(Arc::new(cm)))
        }
        Err(kube::Error::Api(status)) if matches!(status.code, 401 | 403) => Ok(
            Source::Unreadable(format!("{} ({})", status.message, status.reason)),
        ),
        Err(source) => Err(Error::GetConfigMap {
            name: name.to_owned(),
            source,
        }),
    }
}

/// The pools in `cm`'s namespace that read jobs from it.
pub fn pools_for_jobs_source(
    pools: &[Arc<SwarmPool>],
    cm: &ConfigMap,
) -> Vec<ObjectRef<SwarmPool>> {
    let Some(name) = cm.metadata.name.as_deref() else {
        return Vec::new();
    };
    pools
        .iter()
        .filter(|pool| pool.metadata.namespace == cm.metadata.namespace)
        .filter(|pool| jobs_source::reads_from(pool, name))
        .map(|pool| ObjectRef::from_obj(pool.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::api::crd::{ConfigMapRef, JobsFromSource};

    fn pool(name: &str, namespace: &str, sources: &[&str]) -> Arc<SwarmPool> {
        let mut pool = SwarmPool::new(
            name,
            serde_json::from_value(serde_json::json!({
                "selector": {"matchLabels": {"app": "w"}},
                "jobs": [],
            }))
            .unwrap(),
        );
        pool.metadata.namespace = Some(namespace.into());
        pool.spec.jobs_from = sources
            .iter()
            .map(|s| JobsFromSource {
                config_map_ref: ConfigMapRef { name: (*s).into() },
                key: "jobs".into(),
            })
            .collect();
        Arc::new(pool)
    }

    #[test]
    fn a_jobs_source_triggers_the_pools_of_its_namespace_that_name_it() {
        let pools = [
            pool("a", "ns", &["shared", "a-only"]),
            pool("b", "ns", &["shared"]),
            pool("c", "other", &["shared"]),
            pool("d", "ns", &[]),
        ];
        let cm = |name: &str| ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        };
        let names = |refs: Vec<ObjectRef<SwarmPool>>| -> Vec<String> {
            refs.into_iter().map(|r| r.name).collect()
        };
        assert_eq!(
            names(pools_for_jobs_source(&pools, &cm("shared"))),
            ["a", "b"]
        );
        assert_eq!(names(pools_for_jobs_source(&pools, &cm("a-only"))), ["a"]);
        assert!(pools_for_jobs_source(&pools, &cm("unrelated")).is_empty());
    }
}
