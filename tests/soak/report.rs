//! The soak's report: plain text tables on standard output, what a CI log shows and a person
//! reads, ending in PASS or FAIL with the reasons.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::Soak;
use crate::audit::Audit;
use crate::checks::FinalPool;
use crate::faults::Record;
use crate::schedule::FAULT_KINDS;

pub struct Report<'a> {
    pub seed: u64,
    pub minutes: u64,
    pub soak: &'a Soak,
    pub finals: &'a [FinalPool],
    pub audit: &'a Audit,
    /// Seconds from the end of the plan until every pool settled for good.
    pub final_settle: f64,
    pub cleanup_errors: &'a [String],
}

impl Report<'_> {
    /// The report as printed: a header, then one section after another.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let soak = self.soak;
        let _ = writeln!(
            out,
            "== swarm-operator soak: seed {}, {} min ==",
            self.seed, self.minutes
        );
        let records = soak.faults.records();
        let repairs = soak.repairs.lock().unwrap_or_else(|p| p.into_inner()).all();
        faults(&mut out, soak, &records, &repairs);
        timeline(&mut out, &records, &repairs);
        loads(&mut out, soak);
        self.pools(&mut out);
        replicas(&mut out, soak);
        self.api(&mut out, &repairs);
        verdict(&mut out, soak);
        out
    }

    /// Per pool, its samples and the job-seconds run twice or by nobody; then how long the pools
    /// took to settle after the plan.
    fn pools(&self, out: &mut String) {
        let finals: BTreeMap<&str, &FinalPool> =
            self.finals.iter().map(|f| (f.name.as_str(), f)).collect();
        let _ = writeln!(
            out,
            "\n{:<16} {:>10} {:>12} {:>14} {:>6} {:>12} {:>10}",
            "POOL", "SAMPLES", "DUP JOB-S", "UNHELD JOB-S", "JOBS", "UNHELD END", "TWICE END"
        );
        for (pool, stats) in self.soak.pools.stats() {
            let end = finals.get(pool.as_str());
            let cell = |f: fn(&FinalPool) -> usize| end.map_or("-".into(), |e| f(e).to_string());
            let _ = writeln!(
                out,
                "{pool:<16} {:>10} {:>12.2} {:>14.1} {:>6} {:>12} {:>10}",
                stats.samples,
                stats.duplicate_job_seconds,
                stats.unheld_job_seconds,
                cell(|e| e.jobs),
                cell(|e| e.unheld),
                cell(|e| e.held_twice),
            );
        }
        let _ = writeln!(
            out,
            "final settle after the plan: {:.1} s",
            self.final_settle
        );
    }

    /// The API requests of the audit log by verb, the errors, the repairs and clean-up notes.
    fn api(&self, out: &mut String, repairs: &[(f64, String)]) {
        let audit = self.audit;
        let minutes = audit
            .span
            .map_or(1.0, |(a, b)| ((b - a) / 60.0).max(1.0 / 60.0));
        let _ = writeln!(out, "\n{:<18} {:>8} {:>10}", "API VERB", "COUNT", "PER MIN");
        for (verb, count) in &audit.by_verb {
            let _ = writeln!(
                out,
                "{verb:<18} {count:>8} {:>10.1}",
                *count as f64 / minutes
            );
        }
        let _ = writeln!(
            out,
            "429s: {}   5xx: {}   403s: {}   retries after a 429/5xx: {}",
            audit.throttled, audit.server_errors, audit.forbidden, audit.retries
        );
        for (at, what) in repairs {
            let _ = writeln!(out, "  repair at t={at:.0}s: {what}");
        }
        for error in self.cleanup_errors {
            let _ = writeln!(out, "  note: clean-up: {error}");
        }
    }
}

/// A settle that spans a repair of kube-scheduler or kwok measured the control plane's stuck
/// helper, not the operator: such settles get a column of their own.
fn over_a_repair(record: &Record, repairs: &[(f64, String)]) -> bool {
    let until = record
        .settled_after
        .map_or(f64::INFINITY, |s| record.end + s);
    repairs
        .iter()
        .any(|(at, _)| record.end <= *at && *at <= until)
}

/// The longest settle of these faults, `never` when one never settled, `-` when there are none.
fn longest(of_kind: &[&Record]) -> String {
    if of_kind.is_empty() {
        return "-".to_owned();
    }
    let never = of_kind.iter().any(|r| r.settled_after.is_none());
    let longest = of_kind
        .iter()
        .filter_map(|r| r.settled_after)
        .fold(0.0f64, f64::max);
    if never {
        format!("never (>{longest:.1})")
    } else {
        format!("{longest:.1}")
    }
}

/// Per fault kind, how many were injected and failed and the longest settles; the etcd
/// compactions; a note for each fault that could not be injected.
fn faults(out: &mut String, soak: &Soak, records: &[Record], repairs: &[(f64, String)]) {
    let _ = writeln!(
        out,
        "\n{:<20} {:>8} {:>8} {:>22} {:>22}",
        "FAULT", "COUNT", "FAILED", "LONGEST SETTLE (s)", "OVER A REPAIR (s)"
    );
    for kind in FAULT_KINDS {
        let of_kind: Vec<&Record> = records.iter().filter(|r| r.kind == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        let failed = of_kind.iter().filter(|r| r.error.is_some()).count();
        let (over_repair, own): (Vec<&Record>, Vec<&Record>) =
            of_kind.iter().partition(|r| over_a_repair(r, repairs));
        let _ = writeln!(
            out,
            "{kind:<20} {:>8} {failed:>8} {:>22} {:>22}",
            of_kind.len(),
            longest(&own),
            longest(&over_repair)
        );
    }
    let (done, failed) = *soak.compactions.lock().unwrap_or_else(|p| p.into_inner());
    let _ = writeln!(
        out,
        "{:<20} {done:>8} {failed:>8} {:>22}",
        "etcd-compaction", "-"
    );
    for record in records.iter().filter(|r| r.error.is_some()) {
        let _ = writeln!(
            out,
            "  note: {} at {:.0}s could not be injected: {}",
            record.kind,
            record.start,
            record.error.as_deref().unwrap_or_default()
        );
    }
}

/// Every fault in order, with when it settled.
fn timeline(out: &mut String, records: &[Record], repairs: &[(f64, String)]) {
    let _ = writeln!(out, "\nFAULT TIMELINE (seconds since the start)");
    for record in records {
        let settled = record
            .settled_after
            .map_or_else(|| "never".to_owned(), |s| format!("{s:.1}"));
        let repaired = if over_a_repair(record, repairs) {
            " (over a repair)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {:>7.1} .. {:>7.1}  {:<18} settled after {settled:>6}{repaired}  {}",
            record.start, record.end, record.kind, record.detail
        );
    }
}

/// The load actions by kind: done and failed.
fn loads(out: &mut String, soak: &Soak) {
    let _ = writeln!(out, "\n{:<24} {:>8} {:>8}", "LOAD", "DONE", "FAILED");
    for (kind, (done, failed)) in soak.loads.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        let _ = writeln!(out, "{kind:<24} {done:>8} {failed:>8}");
    }
}

/// Per operator replica, its starts and exits (by the soak, near a fault, unexplained) and its
/// memory; then the Lease handovers.
fn replicas(out: &mut String, soak: &Soak) {
    let _ = writeln!(
        out,
        "\n{:<18} {:>7} {:>6} {:>8} {:>10} {:>12} {:>12} {:>12}",
        "REPLICA",
        "STARTS",
        "EXITS",
        "BY SOAK",
        "NEAR FAULT",
        "UNEXPLAINED",
        "PEAK RSS MiB",
        "END RSS MiB"
    );
    for replica in &soak.replicas {
        let exits = replica.exits();
        let by_soak = exits.iter().filter(|e| e.killed_by_soak).count();
        let near_fault = exits
            .iter()
            .filter(|e| !e.killed_by_soak && soak.faults.near_fault(e.at, crate::FAULT_GRACE))
            .count();
        let unexplained = exits.len() - by_soak - near_fault;
        let (peak, last) = replica.rss_kb();
        let _ = writeln!(
            out,
            "{:<18} {:>7} {:>6} {by_soak:>8} {near_fault:>10} {unexplained:>12} {:>12.1} {:>12.1}",
            replica.name,
            replica.starts(),
            exits.len(),
            peak as f64 / 1024.0,
            last as f64 / 1024.0
        );
    }
    let _ = writeln!(out, "lease handovers seen: {}", soak.history.handovers());
}

/// PASS, or FAIL with every violation.
fn verdict(out: &mut String, soak: &Soak) {
    let violations = soak.violations.all();
    if violations.is_empty() {
        let _ = writeln!(out, "\nPASS");
    } else {
        let _ = writeln!(out, "\nFAIL ({} violations)", violations.len());
        for (at, what) in violations {
            let _ = writeln!(out, "  t={at:.1}s {what}");
        }
    }
}
