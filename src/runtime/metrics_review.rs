//! The reviews of a `/metrics` client's token, asked of the API server: a TokenReview
//! (authentication.k8s.io/v1), then a SubjectAccessReview (authorization.k8s.io/v1) of the
//! user it names. The operator's RBAC grants `create` on both.

use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use crate::runtime::metrics_auth::{METRICS_PATH, METRICS_VERB, ReviewError, Reviewer, Verdict};

/// Reviews tokens with the operator's own client.
pub struct ApiServerReviewer {
    client: kube::Client,
}

impl ApiServerReviewer {
    /// Asks through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    /// Who `token` authenticates as, or `None` when the API server does not accept it.
    async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| ReviewError(format!("TokenReview: {e}")))?;
        let status = reviewed.status.unwrap_or_default();
        Ok(if status.authenticated == Some(true) {
            Some(status.user.unwrap_or_default())
        } else {
            None
        })
    }

    /// Whether `user` may `get` the non-resource URL `/metrics`.
    async fn authorize(&self, user: UserInfo) -> Result<bool, ReviewError> {
        let review = SubjectAccessReview {
            spec: access_review_spec(user),
            ..SubjectAccessReview::default()
        };
        let reviewed = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| ReviewError(format!("SubjectAccessReview: {e}")))?;
        Ok(reviewed.status.is_some_and(|status| status.allowed))
    }
}

/// The SubjectAccessReview of `user` for `get` on `/metrics`.
pub fn access_review_spec(user: UserInfo) -> SubjectAccessReviewSpec {
    SubjectAccessReviewSpec {
        user: user.username,
        groups: user.groups,
        uid: user.uid,
        extra: user.extra,
        non_resource_attributes: Some(NonResourceAttributes {
            path: Some(METRICS_PATH.to_owned()),
            verb: Some(METRICS_VERB.to_owned()),
        }),
        ..SubjectAccessReviewSpec::default()
    }
}

impl Reviewer for ApiServerReviewer {
    fn review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Verdict, ReviewError>> {
        Box::pin(async move {
            let Some(user) = self.authenticate(token).await? else {
                return Ok(Verdict::Unauthenticated);
            };
            Ok(if self.authorize(user).await? {
                Verdict::Allowed
            } else {
                Verdict::Forbidden
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_access_review_asks_for_the_reviewed_user_s_get_on_metrics() {
        let user = UserInfo {
            username: Some("system:serviceaccount:monitoring:prometheus".into()),
            uid: Some("1234".into()),
            groups: Some(vec!["system:serviceaccounts".into()]),
            extra: Some([("scopes".to_owned(), vec!["a".to_owned()])].into()),
        };
        let spec = access_review_spec(user.clone());
        assert_eq!(spec.user, user.username);
        assert_eq!(spec.uid, user.uid);
        assert_eq!(spec.groups, user.groups);
        assert_eq!(spec.extra, user.extra);
        let attributes = spec.non_resource_attributes.unwrap();
        assert_eq!(attributes.path.as_deref(), Some("/metrics"));
        assert_eq!(attributes.verb.as_deref(), Some("get"));
        assert!(spec.resource_attributes.is_none());
    }
}
