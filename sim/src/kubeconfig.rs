//! The kubeconfig a simulation writes: plain HTTP to its address, context `kube-sim`.

use std::io::Write;
use std::path::Path;

/// The kubeconfig YAML for a server at `url`.
pub fn render(url: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kube-sim
  cluster:
    server: {url}
contexts:
- name: kube-sim
  context:
    cluster: kube-sim
    user: kube-sim
    namespace: default
current-context: kube-sim
preferences: {{}}
users:
- name: kube-sim
  user: {{}}
"
    )
}

/// Writes the kubeconfig atomically (temporary file, then rename), so a reader polling
/// for the file never sees half of it.
pub fn write(path: &Path, url: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(render(url).as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}
