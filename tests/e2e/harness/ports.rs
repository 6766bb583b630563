//! Loopback ports for the worker processes' readiness endpoints.
//!
//! A worker is told its address before it starts (the fleet writes it on the pod for the
//! simulated kubelet to probe), so it cannot bind port 0. A port taken from the kernel's
//! ephemeral range and handed over could be taken in between by any connection of the
//! scenarios running beside it; so ports come from below that range, where the kernel never
//! picks one, each handed out once per test process.

use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out: above the well-known and most registered service ports.
const FIRST: u32 = 10_000;

/// A loopback port that nothing listens on, and that no other call in this process returns.
pub fn loopback_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let end = ephemeral_start();
    // Processes started together begin apart.
    let offset = std::process::id() * 61;
    for _ in FIRST..end {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + (offset + n) % (end - FIRST);
        let port = u16::try_from(port).expect("below the ephemeral range");
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port between {FIRST} and {end}");
}

/// Where the kernel's ephemeral ports begin (32768 when it cannot be read: Linux's default).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .filter(|start| *start > FIRST + 1_000)
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_free_and_outside_the_ephemeral_range() {
        let ports: Vec<u16> = (0..200).map(|_| loopback_port()).collect();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len(), "a port was handed out twice");
        let end = ephemeral_start();
        assert!(
            ports
                .iter()
                .all(|&p| u32::from(p) >= FIRST && u32::from(p) < end)
        );
        let held = TcpListener::bind((Ipv4Addr::LOCALHOST, ports[0])).expect("it was free");
        drop(held);
    }
}
