//! The API the operator serves: the SwarmPool resource and its conditions. The names it uses
//! on other objects are the wire contract's (`swarm_protocol::names`).

pub mod conditions;
pub mod crd;
pub mod failure;
