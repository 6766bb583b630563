//! Who may read `/metrics`: a client whose bearer token the API server's TokenReview accepts
//! and whose SubjectAccessReview allows `get` on the non-resource URL `/metrics`, as
//! controller-runtime's `filters.WithAuthenticationAndAuthorization` decides. The verdicts are
//! cached by the token's SHA-256 for a short, bounded time, so a scrape every 15 s costs the
//! API server two requests a minute. The decision and the cache are pure; the reviews are made
//! by a [`Reviewer`] ([`crate::runtime::metrics_review`] against the API server).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http::header::{AUTHORIZATION, HeaderMap};

/// The non-resource URL and verb a client must be allowed.
pub const METRICS_PATH: &str = "/metrics";
/// See [`METRICS_PATH`].
pub const METRICS_VERB: &str = "get";

/// How long an allowed token is trusted without asking again: a revoked role or token stops
/// working within this time.
pub const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a refused token stays refused without asking again: short, so a role just granted
/// takes effect soon, yet a client retrying in a loop costs little.
pub const DENIED_TTL: Duration = Duration::from_secs(10);
/// The most tokens remembered: a client sending a new token with each request costs memory
/// up to this bound (and one review per request).
pub const MAX_ENTRIES: usize = 256;

/// What the API server said of a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No token, or one TokenReview did not authenticate: 401.
    Unauthenticated,
    /// Authenticated, but not allowed `get` on `/metrics`: 403.
    Forbidden,
    /// Served.
    Allowed,
}

impl Verdict {
    fn ttl(self) -> Duration {
        match self {
            Verdict::Allowed => ALLOWED_TTL,
            Verdict::Unauthenticated | Verdict::Forbidden => DENIED_TTL,
        }
    }
}

/// The bearer token of a request's `Authorization` header, if it has one.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// What the cache keys a token by: its SHA-256, so no token is kept in memory.
pub type TokenKey = [u8; 32];

/// The SHA-256 of `token`.
pub fn token_key(token: &str) -> TokenKey {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    digest
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes long")
}

/// Verdicts by token, each until it expires, at most [`MAX_ENTRIES`] of them.
#[derive(Debug, Default)]
pub struct ReviewCache {
    entries: HashMap<TokenKey, (Verdict, Instant)>,
}

impl ReviewCache {
    /// The verdict on `key` if one is cached and unexpired at `now`.
    pub fn get(&self, key: &TokenKey, now: Instant) -> Option<Verdict> {
        let (verdict, expires) = self.entries.get(key)?;
        (now < *expires).then_some(*verdict)
    }

    /// Remembers `verdict` on `key` from `now` for its time to live; when full, forgets the
    /// expired entries first, then those closest to expiring.
    pub fn insert(&mut self, key: TokenKey, verdict: Verdict, now: Instant) {
        if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(&key) {
            self.entries.retain(|_, (_, expires)| now < *expires);
            while self.entries.len() >= MAX_ENTRIES {
                let soonest = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (_, expires))| *expires)
                    .map(|(key, _)| *key)
                    .expect("a full cache has entries");
                self.entries.remove(&soonest);
            }
        }
        self.entries.insert(key, (verdict, now + verdict.ttl()));
    }

    /// How many verdicts are remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no verdict is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A review that could not be made (the API server unreachable or refusing the operator):
/// the client gets 500 and nothing is cached.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReviewError(pub String);

/// Asks whether a token may read `/metrics`.
pub trait Reviewer: Send + Sync + 'static {
    /// The verdict on `token`: a TokenReview, then, if it authenticates, a
    /// SubjectAccessReview of its user.
    fn review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Verdict, ReviewError>>;
}

/// Decides each request to `/metrics`, asking its [`Reviewer`] only about tokens it has no
/// fresh verdict on.
pub struct Authorizer {
    reviewer: Box<dyn Reviewer>,
    cache: Mutex<ReviewCache>,
}

impl Authorizer {
    /// Asks `reviewer`.
    pub fn new(reviewer: impl Reviewer) -> Self {
        Self {
            reviewer: Box::new(reviewer),
            cache: Mutex::new(ReviewCache::default()),
        }
    }

    /// The verdict on a request with `headers`: without a bearer token, unauthenticated.
    pub async fn check(&self, headers: &HeaderMap) -> Result<Verdict, ReviewError> {
        let Some(token) = bearer_token(headers) else {
            return Ok(Verdict::Unauthenticated);
        };
        let key = token_key(token);
        if let Some(verdict) = self.cache().get(&key, Instant::now()) {
            return Ok(verdict);
        }
        let verdict = self.reviewer.review(token).await?;
        self.cache().insert(key, verdict, Instant::now());
        Ok(verdict)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, ReviewCache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn headers(authorization: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, authorization.parse().unwrap());
        headers
    }

    #[test]
    fn only_a_non_empty_bearer_token_is_taken() {
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("Basic dXNlcjpwdw==")), None);
        assert_eq!(bearer_token(&headers("Bearer ")), None);
        assert_eq!(bearer_token(&headers("Bearer")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    #[test]
    fn an_allowed_token_is_trusted_longer_than_a_refused_one() {
        let mut cache = ReviewCache::default();
        let now = Instant::now();
        let (allowed, refused) = (token_key("allowed"), token_key("refused"));
        cache.insert(allowed, Verdict::Allowed, now);
        cache.insert(refused, Verdict::Forbidden, now);
        let later = now + DENIED_TTL;
        assert_eq!(cache.get(&allowed, later), Some(Verdict::Allowed));
        assert_eq!(cache.get(&refused, later), None);
        assert_eq!(cache.get(&allowed, now + ALLOWED_TTL), None);
        assert_eq!(cache.get(&token_key("unknown"), now), None);
    }

    #[test]
    fn the_cache_stays_bounded_and_forgets_what_expires_soonest_first() {
        let mut cache = ReviewCache::default();
        let start = Instant::now();
        let first = token_key("token-0");
        cache.insert(first, Verdict::Forbidden, start);
        for i in 1..MAX_ENTRIES * 2 {
            cache.insert(token_key(&format!("token-{i}")), Verdict::Allowed, start);
            assert!(cache.len() <= MAX_ENTRIES);
        }
        assert_eq!(cache.len(), MAX_ENTRIES);
        assert_eq!(
            cache.get(&first, start),
            None,
            "the refused entry went first"
        );
        let last = token_key(&format!("token-{}", MAX_ENTRIES * 2 - 1));
        assert_eq!(cache.get(&last, start), Some(Verdict::Allowed));
    }

    /// Answers `verdict` and counts the reviews it was asked for.
    struct Counting {
        verdict: Verdict,
        reviews: Arc<AtomicUsize>,
    }

    impl Reviewer for Counting {
        fn review<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Verdict, ReviewError>> {
            self.reviews.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move { Ok(self.verdict) })
        }
    }

    #[tokio::test]
    async fn a_scrape_every_15_s_asks_the_api_server_once_a_minute() {
        let reviews = Arc::new(AtomicUsize::new(0));
        let authorizer = Authorizer::new(Counting {
            verdict: Verdict::Allowed,
            reviews: reviews.clone(),
        });
        for _ in 0..4 {
            let verdict = authorizer.check(&headers("Bearer scraper")).await.unwrap();
            assert_eq!(verdict, Verdict::Allowed);
        }
        assert_eq!(reviews.load(Ordering::SeqCst), 1);
        authorizer.check(&headers("Bearer other")).await.unwrap();
        assert_eq!(
            reviews.load(Ordering::SeqCst),
            2,
            "another token is reviewed"
        );
    }

    #[tokio::test]
    async fn a_request_without_a_token_is_unauthenticated_without_a_review() {
        let reviews = Arc::new(AtomicUsize::new(0));
        let authorizer = Authorizer::new(Counting {
            verdict: Verdict::Allowed,
            reviews: reviews.clone(),
        });
        let verdict = authorizer.check(&HeaderMap::new()).await.unwrap();
        assert_eq!(verdict, Verdict::Unauthenticated);
        assert_eq!(reviews.load(Ordering::SeqCst), 0);
    }
}
