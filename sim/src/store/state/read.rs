//! Reads: single objects, lists (paged from a snapshot) and the start of watches.

use std::sync::Arc;

use serde_json::Value;

use super::{State, key};
use crate::store::error::ApiError;
use crate::store::types::ResourceType;
use crate::store::watch::{Change, WatchStart};
use crate::store::{FieldSelector, LabelSelector, events};

/// Page snapshots kept for `continue` tokens; older ones expire (410).
const MAX_PAGE_SNAPSHOTS: usize = 64;

const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// One page of a list.
pub(crate) struct ListPage {
    /// The objects in the listed version, shared with the store.
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

impl State {
    /// The stored objects of one namespace (or all, with `None`) whose names start with
    /// `prefix`, in storage form, ordered by namespace and name. Scans only that key range.
    fn scan<'a>(
        &'a self,
        rt: &ResourceType,
        ns: Option<&'a str>,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
        let ns = ns.filter(|_| rt.namespaced);
        let start = key(ns.unwrap_or(""), prefix);
        self.bucket(rt)
            .into_iter()
            .flat_map(move |b| b.range(start.clone()..))
            .take_while(move |((ons, name), _)| {
                ns.is_none_or(|n| ons.as_str() == n) && (ns.is_none() || name.starts_with(prefix))
            })
            .filter(move |((_, name), _)| name.starts_with(prefix))
            .map(|(_, o)| o)
    }

    /// Like [`State::list_all`], sharing the objects instead of copying them.
    pub(crate) fn list_shared(&self, rt: &ResourceType, ns: Option<&str>) -> Vec<Arc<Value>> {
        self.scan(rt, ns, "")
            .map(|o| events::served_shared(o, rt))
            .collect()
    }

    /// The objects of one namespace whose names start with `prefix`, in `rt`'s version.
    pub(crate) fn list_prefixed(
        &self,
        rt: &ResourceType,
        ns: &str,
        prefix: &str,
    ) -> Vec<Arc<Value>> {
        self.scan(rt, Some(ns), prefix)
            .map(|o| events::served_shared(o, rt))
            .collect()
    }

    /// The object in `rt`'s version, shared with the store.
    pub(crate) fn get_shared(&self, rt: &ResourceType, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.stored_shared(rt, ns, name)
            .map(|o| events::served_shared(o, rt))
    }

    /// The object in `rt`'s version, or 404.
    pub(crate) fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.stored(rt, ns, name)
            .map(|o| events::to_served(o, rt))
            .ok_or_else(|| ApiError::not_found(rt, name))
    }

    /// All objects of a type (one namespace or all), in `rt`'s version.
    pub(crate) fn list_all(&self, rt: &ResourceType, ns: Option<&str>) -> Vec<Value> {
        self.scan(rt, ns, "")
            .map(|o| events::to_served(o, rt))
            .collect()
    }

    /// One page of a filtered list; later pages come from a snapshot taken by the first.
    pub(crate) fn list_page(
        &mut self,
        rt: &ResourceType,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<ListPage, ApiError> {
        let (rv, mut items) = match continue_token {
            Some(token) => {
                let id = parse_continue(token)?;
                self.pages
                    .remove(&id)
                    .ok_or_else(|| ApiError::expired(CONTINUE_EXPIRED))?
            }
            None => {
                let items = self
                    .scan(rt, ns, "")
                    .map(|o| events::served_shared(o, rt))
                    .filter(|o| labels.matches(o) && fields.matches(o))
                    .collect();
                (self.rv, items)
            }
        };
        let mut page = ListPage {
            items: Vec::new(),
            resource_version: rv,
            continue_token: None,
            remaining: None,
        };
        if let Some(limit) = limit.filter(|&limit| limit > 0 && items.len() > limit) {
            let rest = items.split_off(limit);
            let remaining = rest.len();
            let id = self.keep_page(rv, rest);
            page.continue_token = Some(make_continue(rv, id));
            page.remaining = labels.is_empty().then_some(remaining);
        }
        page.items = items;
        Ok(page)
    }

    /// Keeps the rest of a list for its `continue` token, dropping the oldest snapshots
    /// beyond [`MAX_PAGE_SNAPSHOTS`]; returns the snapshot's id.
    fn keep_page(&mut self, rv: u64, rest: Vec<Arc<Value>>) -> u64 {
        let id = self.next_page_id;
        self.next_page_id += 1;
        self.pages.insert(id, (rv, rest));
        while self.pages.len() > MAX_PAGE_SNAPSHOTS {
            let oldest = *self.pages.keys().next().expect("non-empty");
            self.pages.remove(&oldest);
        }
        id
    }

    /// Starts a watch of `rt` from a resourceVersion (`None` or 0: from the current state).
    pub(crate) fn watch(
        &self,
        rt: &ResourceType,
        from: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        let rx = self.history.subscribe();
        match from {
            None | Some(0) => Ok(WatchStart {
                initial: self.list_shared(rt, None),
                backlog: Vec::new(),
                rx,
                rv: self.rv,
            }),
            Some(from) => {
                let backlog = self
                    .history
                    .since(from, &rt.storage)
                    .ok_or_else(|| self.too_old(from))?;
                Ok(WatchStart {
                    initial: Vec::new(),
                    backlog,
                    rx,
                    rv: self.rv,
                })
            }
        }
    }

    /// For an open watch: the changes of `rt` after `rv` and the resourceVersion they reach,
    /// or 410 when some aged out of the history before the watch delivered them.
    pub(crate) fn watch_changes(
        &self,
        rt: &ResourceType,
        rv: u64,
    ) -> Result<(Vec<Arc<Change>>, u64), ApiError> {
        match self.history.following(rv, &rt.storage) {
            Some(changes) => Ok((changes, self.rv)),
            None => Err(self.too_old(rv)),
        }
    }

    fn too_old(&self, rv: u64) -> ApiError {
        ApiError::expired(format!(
            "too old resource version: {rv} ({})",
            self.history.compacted() + 1
        ))
    }
}

fn make_continue(rv: u64, id: u64) -> String {
    format!("{rv}.{id}")
}

fn parse_continue(token: &str) -> Result<u64, ApiError> {
    token
        .split_once('.')
        .and_then(|(_, id)| id.parse().ok())
        .ok_or_else(|| ApiError::bad_request(format!("invalid continue token {token:?}")))
}
