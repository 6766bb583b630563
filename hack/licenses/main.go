// Command licenses names the licence of each Go module listed on its input, one
// "path version dir" per line (as `go list -deps -f` prints them), from the licence file in
// the module's directory, and prints "path<TAB>version<TAB>licences" sorted by path. It exits
// 1 when a module has no licence file it can read or a licence outside -allow.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/licensecheck"
)

// The names a module's licence file goes by, in the order they are looked for.
var licenceFiles = []string{"LICENSE", "LICENSE.txt", "LICENSE.md", "LICENCE", "COPYING", "LICENSE-APACHE", "LICENSE-MIT"}

func main() {
	allow := flag.String("allow", "", "comma-separated SPDX identifiers a dependency may be under")
	flag.Parse()
	allowed := strings.Split(*allow, ",")
	failed := false
	scanner := bufio.NewScanner(os.Stdin)
	var lines []string
	for scanner.Scan() {
		if line := strings.TrimSpace(scanner.Text()); line != "" {
			lines = append(lines, line)
		}
	}
	slices.Sort(lines)
	lines = slices.Compact(lines)
	for _, line := range lines {
		fields := strings.Fields(line)
		if len(fields) != 3 {
			fmt.Fprintf(os.Stderr, "licenses: want \"path version dir\", got %q\n", line)
			failed = true
			continue
		}
		ids, err := licences(fields[2])
		if err != nil {
			fmt.Fprintf(os.Stderr, "licenses: %s %s: %v\n", fields[0], fields[1], err)
			failed = true
			continue
		}
		for _, id := range ids {
			if !slices.Contains(allowed, id) {
				fmt.Fprintf(os.Stderr, "licenses: %s %s is under %s, which -allow does not list: read it, then allow it or drop the module\n", fields[0], fields[1], id)
				failed = true
			}
		}
		fmt.Printf("%s\t%s\t%s\n", fields[0], fields[1], strings.Join(ids, " AND "))
	}
	if err := scanner.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "licenses: reading the module list: %v\n", err)
		failed = true
	}
	if failed {
		os.Exit(1)
	}
}

// licences are the SPDX identifiers licensecheck finds in the module's licence file.
func licences(dir string) ([]string, error) {
	for _, name := range licenceFiles {
		text, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		cov := licensecheck.Scan(text)
		if cov.Percent < 75 {
			return nil, fmt.Errorf("%s: only %.0f%% of it is a licence licensecheck knows", name, cov.Percent)
		}
		var ids []string
		for _, m := range cov.Match {
			if !slices.Contains(ids, m.ID) {
				ids = append(ids, m.ID)
			}
		}
		slices.Sort(ids)
		return ids, nil
	}
	return nil, fmt.Errorf("no licence file (%s) in %s", strings.Join(licenceFiles, ", "), dir)
}
