package swarmworker

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Fuzz targets for the texts a worker reads from others, seeded from the protocol's vectors.
// `go test` runs the seeds and the corpus in testdata/fuzz/ (inputs that once found a bug);
// scripts/go-worker.sh fuzz runs each target for a bounded time.

// seedTexts adds the text of every case of a vector file (the cases of field, when set).
func seedTexts(f *testing.F, file, field string) {
	f.Helper()
	raw, err := os.ReadFile(filepath.Join(vectorsDir, file))
	if err != nil {
		f.Fatal(err)
	}
	var cases []struct {
		Text string `json:"text"`
	}
	if field == "" {
		err = json.Unmarshal(raw, &cases)
	} else {
		var fields map[string]json.RawMessage
		if err = json.Unmarshal(raw, &fields); err == nil {
			err = json.Unmarshal(fields[field], &cases)
		}
	}
	if err != nil {
		f.Fatalf("%s: %v", file, err)
	}
	for _, c := range cases {
		f.Add(c.Text)
	}
}

// FuzzParseConfig: any text is read or refused, never a panic; a refusal names config.yml;
// an accepted config, written again as YAML, reads back the same.
func FuzzParseConfig(f *testing.F) {
	seedTexts(f, "config.json", "")
	f.Fuzz(func(t *testing.T, text string) {
		config, err := ParseConfig(text)
		if err != nil {
			if !strings.Contains(err.Error(), "config.yml") {
				t.Fatalf("the refusal %q does not name config.yml", err)
			}
			return
		}
		again, err := ParseConfig(renderConfig(config))
		if err != nil || !reflect.DeepEqual(again, config) {
			t.Fatalf("%+v written as %q reads back as %+v (%v)", config, renderConfig(config), again, err)
		}
	})
}

// FuzzParseIndex: any text is read or refused, never a panic; a refusal names index.yml; an
// accepted index, rendered, reads back the same.
func FuzzParseIndex(f *testing.F) {
	seedTexts(f, "slices.json", "indexes")
	seedTexts(f, "slices.json", "unusable")
	f.Fuzz(func(t *testing.T, text string) {
		index, err := ParseIndex(text)
		if err != nil {
			if !strings.Contains(err.Error(), "index.yml") {
				t.Fatalf("the refusal %q does not name index.yml", err)
			}
			return
		}
		again, err := ParseIndex(index.Render())
		if err != nil || !reflect.DeepEqual(again, index) {
			t.Fatalf("%+v rendered as %q reads back as %+v (%v)", index, index.Render(), again, err)
		}
	})
}

// renderConfig writes config as flow YAML, every name double-quoted with escapes for all but
// printable ASCII, so that any name survives.
func renderConfig(config *Config) string {
	quoted := func(names []string) string {
		out := make([]string, len(names))
		for i, name := range names {
			out[i] = strconv.QuoteToASCII(name)
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	var b strings.Builder
	b.WriteString("{version: " + strconv.FormatUint(config.Version, 10) + ", workloads: {")
	for _, pod := range slices.Sorted(maps.Keys(config.Workloads)) {
		w := config.Workloads[pod]
		b.WriteString(strconv.QuoteToASCII(pod) + ": {version: " + strconv.FormatUint(w.Version, 10) + ", jobs: " + quoted(w.Jobs) + "}, ")
	}
	b.WriteString("}, transit: {")
	for _, pod := range slices.Sorted(maps.Keys(config.Transit)) {
		b.WriteString(strconv.QuoteToASCII(pod) + ": " + quoted(config.Transit[pod]) + ", ")
	}
	b.WriteString("}}")
	return b.String()
}
