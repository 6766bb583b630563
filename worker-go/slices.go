package swarmworker

import (
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
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

// ParseIndex reads an index.yml text as swarm_protocol::slices::Index::parse does: a mapping
// whose version is required (an unquoted whole number, as in config.yml), whose workers map
// each pod name to the version of its ConfigMap and default to none, and whose unknown fields
// are ignored. An error says which field is wrong and why.
func ParseIndex(text string) (Index, error) {
	root, err := document(text)
	if err != nil {
		return Index{}, fmt.Errorf("index.yml is not YAML: %w", err)
	}
	if root == nil || (isPlain(root) && root.Value == "") {
		return Index{}, errors.New("index.yml has no version")
	}
	if root.Kind != yaml.MappingNode {
		return Index{}, fmt.Errorf("index.yml must be a mapping, found %s", shown(root))
	}
	fields, err := structFields(root, "index.yml", "version", "workers")
	if err != nil {
		return Index{}, err
	}
	if fields["version"] == nil {
		return Index{}, errors.New("index.yml has no version")
	}
	index := Index{Workers: map[string]uint64{}}
	if index.Version, err = whole(fields["version"], "index.yml version"); err != nil {
		return Index{}, err
	}
	workers := resolved(fields["workers"])
	if workers != nil && !(isPlain(workers) && workers.Value == "") && workers.Kind != yaml.MappingNode {
		return Index{}, fmt.Errorf("index.yml workers: expected a mapping, found %s", shown(workers))
	}
	err = eachPair(workers, "index.yml workers", func(pod string, value *yaml.Node) error {
		index.Workers[pod], err = whole(value, "index.yml workers."+pod)
		return err
	})
	return index, err
}

// Render is the index as YAML text.
func (i Index) Render() string {
	workers := i.Workers
	if workers == nil {
		workers = map[string]uint64{}
	}
	text, err := sigsyaml.Marshal(Index{Version: i.Version, Workers: workers})
	if err != nil {
		// Integers and strings always marshal.
		panic(err)
	}
	return string(text)
}
