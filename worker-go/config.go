package swarmworker

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Config is a config.yml as a worker reads it: the version, each pod's workload, and the jobs
// in transit. Fields a worker does not know are ignored.
type Config struct {
	// Version is the config version (for a worker's own ConfigMap: the version its entry
	// last changed at, the one it acknowledges). Missing reads as 0.
	Version uint64
	// Workloads holds each pod's entry by pod name.
	Workloads map[string]Workload
	// Transit holds the jobs revoked and not yet granted, by the pod that last held them;
	// they are not the pod's to run.
	Transit map[string][]string
}

// Workload is one pod's entry of config.yml.
type Workload struct {
	// Version is the config version at which this worker's job set last changed.
	Version uint64
	// Jobs are the jobs this worker runs, in spec order; missing or null reads as none.
	Jobs []string
}

// ErrEmptyConfig is the error for a config.yml that is empty or only whitespace.
var ErrEmptyConfig = errors.New("config.yml is empty")

// ParseConfig reads a config.yml text by the protocol's rules (docs/worker-protocol.md,
// "Reading config.yml"), as swarm_protocol::config::WorkerConfig::parse does: the document is a
// mapping; unknown fields are ignored; missing or null versions read as 0, missing or null job
// lists as empty; names are any scalar's text. Every entry and the jobs in transit are checked,
// and an error says which field is wrong and why.
func ParseConfig(text string) (*Config, error) {
	if strings.TrimSpace(text) == "" {
		return nil, ErrEmptyConfig
	}
	root, err := document(text)
	if err != nil {
		return nil, fmt.Errorf("config.yml is not YAML: %w", err)
	}
	if root == nil {
		return nil, errors.New("config.yml holds no document, so no mapping")
	}
	if root.Kind != yaml.MappingNode || localTag(root) {
		return nil, fmt.Errorf("config.yml must be a mapping without a local tag, found %s", shown(root))
	}
	config, err := readConfig(root)
	if err != nil {
		return nil, fmt.Errorf("config.yml is not a worker config: %w", err)
	}
	return config, nil
}

func readConfig(root *yaml.Node) (*Config, error) {
	fields, err := structFields(root, "config.yml", "version", "workloads", "transit")
	if err != nil {
		return nil, err
	}
	config := &Config{Workloads: map[string]Workload{}, Transit: map[string][]string{}}
	if config.Version, err = version(fields["version"], "version"); err != nil {
		return nil, err
	}
	err = eachPair(fields["workloads"], "workloads", func(pod string, value *yaml.Node) error {
		workload, err := readWorkload(value, "workloads."+pod)
		config.Workloads[pod] = workload
		return err
	})
	if err != nil {
		return nil, err
	}
	err = eachPair(fields["transit"], "transit", func(pod string, value *yaml.Node) error {
		jobs, err := names(value, "transit."+pod)
		// Pods without jobs in transit are left out, as the operator writes it.
		if len(jobs) > 0 {
			config.Transit[pod] = jobs
		} else {
			delete(config.Transit, pod)
		}
		return err
	})
	return config, err
}

func readWorkload(node *yaml.Node, path string) (Workload, error) {
	fields, err := structFields(node, path, "version", "jobs")
	if err != nil {
		return Workload{}, err
	}
	v, err := version(fields["version"], path+".version")
	if err != nil {
		return Workload{}, err
	}
	jobs, err := names(fields["jobs"], path+".jobs")
	return Workload{Version: v, Jobs: jobs}, err
}

// Entry is the workload of pod, and whether the config has one. A pod without an entry runs
// nothing.
func (c *Config) Entry(pod string) (Workload, bool) {
	workload, ok := c.Workloads[pod]
	return workload, ok
}

// Observed is one version of a worker's own entry: what it applies and acknowledges.
type Observed struct {
	// Version is the config version.
	Version uint64
	// Jobs are the jobs of this pod's entry; empty when the config has none for it.
	Jobs []string
}

// ParseEntry reads pod's entry of a config.yml text: the config version and the pod's jobs
// (none when the config has no entry for it), or why the text is unusable.
func ParseEntry(text, pod string) (Observed, error) {
	config, err := ParseConfig(text)
	if err != nil {
		return Observed{}, err
	}
	workload, _ := config.Entry(pod)
	jobs := workload.Jobs
	if jobs == nil {
		jobs = []string{}
	}
	return Observed{Version: config.Version, Jobs: jobs}, nil
}
