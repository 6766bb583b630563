//! The API the operator serves and the names it uses on other objects.

pub mod conditions;
pub mod crd;
pub mod names;
