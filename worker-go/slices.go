package swarmworker

import (
	"errors"

	"sigs.k8s.io/yaml"
)

// SliceName is the name of the ConfigMap worker pod reads its entry from under
// rollout.policy: Acknowledge: the pool's ConfigMap name, a dot, the pod name. Each worker has
// its own, so a new version reaches only the workers whose jobs it changes.
func SliceName(configMap, pod string) string {
	return configMap + "." + pod
}

// Index is the pool ConfigMap's index.yml: the config version, and the version each worker's
// own ConfigMap was written at. Workers do not need it; it is here to complete the contract.
type Index struct {
	// Version is the config version.
	Version uint64 `json:"version"`
	// Workers maps each pod name to the version of its own ConfigMap.
	Workers map[string]uint64 `json:"workers"`
}

// ParseIndex reads an index.yml text; its version is required, its workers default to none,
// and unknown fields are ignored.
func ParseIndex(text string) (Index, error) {
	var raw struct {
		Version *uint64           `json:"version"`
		Workers map[string]uint64 `json:"workers"`
	}
	if err := yaml.Unmarshal([]byte(text), &raw); err != nil {
		return Index{}, err
	}
	if raw.Version == nil {
		return Index{}, errors.New("index.yml has no version")
	}
	if raw.Workers == nil {
		raw.Workers = map[string]uint64{}
	}
	return Index{Version: *raw.Version, Workers: raw.Workers}, nil
}

// Render is the index as YAML text.
func (i Index) Render() string {
	workers := i.Workers
	if workers == nil {
		workers = map[string]uint64{}
	}
	text, err := yaml.Marshal(Index{Version: i.Version, Workers: workers})
	if err != nil {
		// Integers and strings always marshal.
		panic(err)
	}
	return string(text)
}
