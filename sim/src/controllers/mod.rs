//! Controllers that run inside the simulated control plane: the StatefulSet, ReplicaSet and
//! Deployment controllers, the kubelet stand-in and the garbage collector.
//!
//! Each controller is level-triggered like its kube-controller-manager counterpart: it watches
//! every committed change through [`Store::subscribe`], marks the objects the change concerns
//! as dirty, and reconciles them from the store's current state. A lagging subscriber and a
//! periodic timer both trigger a full resync, so a missed event delays work but never loses it.

pub mod deployment;
pub mod gc;
pub mod kubelet;
pub mod meta;
pub mod prober;
pub mod replicaset;
pub mod revisions;
pub mod statefulset;

mod claim;
mod events;
mod queue;
mod timers;

use std::time::Duration;

use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::SimConfig;
use crate::mounts::Mounts;
use crate::store::{Store, StoreEvent};

/// How often every controller re-reads the whole store even without events.
const RESYNC_PERIOD: Duration = Duration::from_secs(10);

/// Starts the StatefulSet, ReplicaSet and Deployment controllers, the kubelet stand-in and the
/// garbage collector.
///
/// The tasks run until the store's event channel closes or they are aborted.
pub fn spawn_all(store: Store, mounts: Mounts, config: SimConfig) -> Vec<JoinHandle<()>> {
    // Writes are attributed in managedFields to the component a real cluster would name.
    let controller_manager = store.with_manager("kube-controller-manager");
    vec![
        spawn(statefulset::StatefulSetController::new(
            controller_manager.clone(),
            config.clone(),
        )),
        spawn(replicaset::ReplicaSetController::new(
            controller_manager.clone(),
            config.clone(),
        )),
        spawn(deployment::DeploymentController::new(
            controller_manager.clone(),
        )),
        spawn(kubelet::Kubelet::new(&store, mounts, config)),
        spawn(gc::GarbageCollector::new(controller_manager)),
    ]
}

/// A level-triggered controller driven by store events and its own timers.
trait Controller: Send + 'static {
    /// The store the controller watches.
    fn store(&self) -> &Store;
    /// Notes which objects one committed change concerns; does no writes.
    fn observe(&mut self, event: &StoreEvent);
    /// Marks everything for reconciliation (start-up, lag, periodic safety net).
    fn resync(&mut self);
    /// Reconciles what is dirty or due; returns when it next needs to run without an event.
    fn work(&mut self, now: Instant) -> Option<Instant>;
}

fn spawn<C: Controller>(controller: C) -> JoinHandle<()> {
    tokio::spawn(drive(controller))
}

async fn drive<C: Controller>(mut controller: C) {
    // Subscribe before the first resync so nothing committed in between is missed.
    let mut events = controller.store().subscribe();
    controller.resync();
    let mut next_resync = Instant::now() + RESYNC_PERIOD;
    loop {
        let now = Instant::now();
        if now >= next_resync {
            controller.resync();
            next_resync = now + RESYNC_PERIOD;
        }
        let wake = controller
            .work(now)
            .map_or(next_resync, |at| at.min(next_resync));
        tokio::select! {
            received = events.recv() => match received {
                Ok(event) => {
                    controller.observe(&event);
                    // Take what else is queued so one reconcile covers a burst of changes.
                    loop {
                        match events.try_recv() {
                            Ok(event) => controller.observe(&event),
                            Err(TryRecvError::Lagged(_)) => controller.resync(),
                            Err(TryRecvError::Empty) => break,
                            Err(TryRecvError::Closed) => return,
                        }
                    }
                }
                Err(RecvError::Lagged(_)) => controller.resync(),
                Err(RecvError::Closed) => return,
            },
            () = tokio::time::sleep_until(wake) => {}
        }
    }
}

/// Scales a simulated number of seconds by the configured time scale.
fn scaled_secs(config: &SimConfig, seconds: f64) -> Duration {
    config.scaled(Duration::from_secs_f64(seconds.max(0.0)))
}
