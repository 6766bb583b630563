package swarmworker

import (
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
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

// rawConfig is config.yml as read, before defaults; pointers tell null from missing.
type rawConfig struct {
	Version   *uint64                 `json:"version"`
	Workloads map[string]*rawWorkload `json:"workloads"`
	Transit   map[string]*[]string    `json:"transit"`
}

type rawWorkload struct {
	Version *uint64   `json:"version"`
	Jobs    *[]string `json:"jobs"`
}

// ParseConfig reads a config.yml text as swarm_protocol::config::WorkerConfig::parse does:
// unknown fields are ignored, missing versions read as 0, missing or null job lists as empty.
func ParseConfig(text string) (*Config, error) {
	if strings.TrimSpace(text) == "" {
		return nil, ErrEmptyConfig
	}
	// A document that is not a mapping (a list, a scalar, null) is no config.
	var shape any
	if err := yaml.Unmarshal([]byte(text), &shape); err != nil {
		return nil, fmt.Errorf("config.yml is not a worker config: %w", err)
	}
	if _, ok := shape.(map[string]any); !ok {
		return nil, fmt.Errorf("config.yml is not a worker config: not a mapping")
	}
	var raw rawConfig
	if err := yaml.Unmarshal([]byte(text), &raw); err != nil {
		return nil, fmt.Errorf("config.yml is not a worker config: %w", err)
	}
	config := &Config{
		Version:   deref(raw.Version),
		Workloads: make(map[string]Workload, len(raw.Workloads)),
		Transit:   make(map[string][]string, len(raw.Transit)),
	}
	for pod, workload := range raw.Workloads {
		var read Workload
		if workload != nil {
			read = Workload{Version: deref(workload.Version), Jobs: deref(workload.Jobs)}
		}
		if read.Jobs == nil {
			read.Jobs = []string{}
		}
		config.Workloads[pod] = read
	}
	for pod, jobs := range raw.Transit {
		// Pods without jobs in transit are left out, as the operator writes it.
		if jobs != nil && len(*jobs) > 0 {
			config.Transit[pod] = *jobs
		}
	}
	return config, nil
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

func deref[T any](value *T) T {
	var zero T
	if value == nil {
		return zero
	}
	return *value
}
