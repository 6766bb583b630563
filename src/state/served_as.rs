//! Smaller Rust types for Kubernetes kinds the operator caches by the thousand: each is read
//! and listed through its kind's API, deserialized straight into the fields the operator uses.

/// Implements [`kube::Resource`] for `$summary`, served through `$kind`'s API: same group,
/// version, kind and plural; its `metadata` is the object's.
macro_rules! served_as {
    ($summary:ty, $kind:ty) => {
        impl ::kube::Resource for $summary {
            type DynamicType = ();
            type Scope = ::k8s_openapi::NamespaceResourceScope;

            fn kind(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::kind(dt)
            }
            fn group(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::group(dt)
            }
            fn version(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::version(dt)
            }
            fn plural(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$kind as ::kube::Resource>::plural(dt)
            }
            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

pub(crate) use served_as;
