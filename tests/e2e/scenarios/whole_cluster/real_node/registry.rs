//! An OCI registry on this host, as a user's cluster has one: `crane registry serve`
//! (go-containerregistry, `scripts/install-crane.sh`), plain HTTP on the loopback, and the real
//! node told how to reach it the way containerd is told of any registry: a `hosts.toml` in the
//! directory its configuration names (`hack/real-node/containerd.toml.tmpl`), which containerd
//! reads at each pull. The kubelet then pulls `127.0.0.1:<port>/<name>@<digest>` like any image.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::ports::loopback_port;

/// How long the registry may take to accept connections.
const SERVING_WITHIN: Duration = Duration::from_secs(30);

/// A running registry the real node pulls from. Dropped, it stops, and the node forgets it.
pub(super) struct Registry {
    server: Child,
    /// `127.0.0.1:<port>`: where images and charts go, without a scheme.
    pub address: String,
    /// The registry's directory among the node's containerd hosts.
    hosts_dir: PathBuf,
}

impl Registry {
    /// Starts `crane registry serve` (blobs in `dir`) on a free loopback port and writes its
    /// `hosts.toml` for the node of the cluster in `cluster` (`scripts/real-cluster.sh`'s).
    pub fn start(crane: &Path, dir: &Path, cluster: &Path) -> Registry {
        let address = format!("127.0.0.1:{}", loopback_port());
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let log = std::fs::File::create(dir.with_extension("log")).expect("the registry's log");
        let server = Command::new(crane)
            .args(["registry", "serve", "--address", &address, "--disk"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {} registry serve: {e}", crane.display()));
        let hosts_dir = cluster.join("node/containerd/certs.d").join(&address);
        let registry = Registry {
            server,
            address,
            hosts_dir,
        };
        registry.wait_serving();
        registry.trusted_by_the_node();
        registry
    }

    fn wait_serving(&self) {
        let started = Instant::now();
        while TcpStream::connect(&self.address).is_err() {
            assert!(
                started.elapsed() < SERVING_WITHIN,
                "crane registry serve did not accept connections on {} within {SERVING_WITHIN:?}",
                self.address
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// containerd's hosts.toml for this registry: plain HTTP, for pulling and resolving.
    fn trusted_by_the_node(&self) {
        let url = format!("http://{}", self.address);
        let hosts = format!(
            "server = \"{url}\"\n\n[host.\"{url}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
        );
        std::fs::create_dir_all(&self.hosts_dir)
            .and_then(|()| std::fs::write(self.hosts_dir.join("hosts.toml"), hosts))
            .unwrap_or_else(|e| panic!("write {}/hosts.toml: {e}", self.hosts_dir.display()));
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = std::fs::remove_dir_all(&self.hosts_dir);
    }
}
