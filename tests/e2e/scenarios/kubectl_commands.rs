//! The first commands a new user types besides `kubectl apply`: generators (which send
//! protobuf), `kubectl explain` of the CRD (which reads `/openapi/v3`) and `kubectl auth can-i`
//! (as the operator, and as users bound to the built-in `view` and `edit` roles).

use crate::harness::Env;
use crate::harness::poll::eventually;
use crate::harness::real_cluster::{OPERATOR_ACCOUNT, OPERATOR_NAMESPACE};
use crate::harness::scenario;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_explain_and_auth_can_i_work_as_on_any_cluster() {
    scenario!("kubectl-commands")
        .run(async |env| {
            env.install_crds().await;
            kubectl_create_makes_a_config_map(env).await;
            kubectl_explain_knows_swarm_pools(env).await;
            let namespace = env.example.namespace();
            let can_i = env
                .kubectl
                .run(&["auth", "can-i", "create", "swarmpools", "-n", &namespace])
                .await;
            assert!(
                can_i.success && can_i.stdout.trim() == "yes",
                "the admin may create pools: {can_i:?}"
            );
            if env.is_sim() {
                env.note_skipped("RBAC as the operator (kube-sim allows everything)");
                return;
            }
            the_operator_may_do_what_deploy_grants(env).await;
            view_and_edit_extend_to_swarm_pools(env).await;
        })
        .await;
}

/// `kubectl create namespace` and `kubectl create configmap --from-literal` (generators, which
/// send protobuf) make what they say.
async fn kubectl_create_makes_a_config_map(env: &Env) {
    let namespace = env.example.namespace();
    env.kubectl.ok(&["create", "namespace", &namespace]).await;
    env.kubectl
        .ok(&[
            "-n",
            &namespace,
            "create",
            "configmap",
            "user-notes",
            "--from-literal=owner=streaming-team",
        ])
        .await;
    let created = env
        .config_map("user-notes")
        .await
        .expect("kubectl create configmap created it");
    assert_eq!(
        created
            .data
            .unwrap_or_default()
            .get("owner")
            .map(String::as_str),
        Some("streaming-team")
    );
}

/// `kubectl explain swarmpool.spec.rollout` prints the CRD's schema (from `/openapi/v3`).
async fn kubectl_explain_knows_swarm_pools(env: &Env) {
    // A real API server publishes a new CRD's schema a moment after the CRD is Established.
    let kubectl = &env.kubectl;
    let explained = eventually("kubectl explain to know SwarmPools", || async move {
        let out = kubectl.run(&["explain", "swarmpool.spec.rollout"]).await;
        if out.success {
            Ok(out.stdout)
        } else {
            Err(out.stderr)
        }
    })
    .await;
    for expected in [
        "KIND:",
        "SwarmPool",
        "FIELD: rollout",
        "handoff",
        "Exclusive",
    ] {
        assert!(
            explained.contains(expected),
            "kubectl explain swarmpool.spec.rollout prints {expected:?}:\n{explained}"
        );
    }
}

/// RBAC as the operator's ServiceAccount sees it: what deploy/ grants, and no more.
async fn the_operator_may_do_what_deploy_grants(env: &Env) {
    let namespace = env.example.namespace();
    let operator = format!("--as=system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_ACCOUNT}");
    for (verb, resource, subresource, expected) in [
        ("patch", "swarmpools", "status", "yes"),
        ("delete", "pods", "", "yes"),
        ("update", "swarmpools", "", "no"),
        ("patch", "swarmpools", "", "no"),
        // Workers' own ConfigMaps (Acknowledge) are deleted once a worker has nothing.
        ("delete", "configmaps", "", "yes"),
        ("update", "configmaps", "", "no"),
        ("get", "secrets", "", "no"),
    ] {
        let subresource = format!("--subresource={subresource}");
        let answer = env
            .kubectl
            .run(&[
                "auth",
                "can-i",
                verb,
                resource,
                &subresource,
                "-n",
                &namespace,
                &operator,
            ])
            .await;
        assert_eq!(
            answer.stdout.trim(),
            expected,
            "can the operator {verb} {resource} ({subresource})? {answer:?}"
        );
    }
}

/// The people using pools: deploy/'s aggregated ClusterRoles extend the built-in `view` and
/// `edit` roles to SwarmPools.
async fn view_and_edit_extend_to_swarm_pools(env: &Env) {
    let namespace = env.example.namespace();
    for (user, role) in [("swarm-viewer", "view"), ("swarm-editor", "edit")] {
        let role = format!("--clusterrole={role}");
        let user_flag = format!("--user={user}");
        env.kubectl
            .ok(&[
                "-n",
                &namespace,
                "create",
                "rolebinding",
                user,
                &role,
                &user_flag,
            ])
            .await;
    }
    for (user, verb, expected) in [
        ("swarm-viewer", "list", "yes"),
        ("swarm-viewer", "create", "no"),
        ("swarm-editor", "create", "yes"),
        ("swarm-editor", "delete", "yes"),
    ] {
        let as_user = format!("--as={user}");
        let args = [
            "auth",
            "can-i",
            verb,
            "swarmpools",
            "-n",
            &namespace,
            &as_user,
        ];
        let kubectl = &env.kubectl;
        eventually(
            &format!("{user} {verb} swarmpools: {expected}"),
            || async move {
                let answer = kubectl.run(&args).await;
                match answer.stdout.trim() {
                    got if got == expected => Ok(()),
                    got => Err(format!("can-i answers {got:?}")),
                }
            },
        )
        .await;
    }
}
