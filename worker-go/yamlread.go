package swarmworker

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// The YAML the protocol's texts are read as: nodes, with each value resolved as the Rust crate
// swarm-protocol (serde_yaml, YAML 1.2's core schema) resolves it, not as YAML 1.1 would (`yes`
// true, `010` eight). The rules are docs/worker-protocol.md's "Reading config.yml".

const quotedOrBlock = yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle

// document is the root node of text's only document; nil when the text holds none. A node
// written with the non-specific tag `!` has it as its tag, as the Rust and Python readers see it.
func document(text string) (*yaml.Node, error) {
	// Neither the Rust nor the Python reader can be given other text, and yaml.v3 would read it
	// as UTF-16, where the positions nonSpecific reads are not the text's.
	if !utf8.ValidString(text) {
		return nil, errors.New("the text is not UTF-8")
	}
	// The workers' YAML libraries skip U+FEFF in different places (yaml.v3 any number at the
	// text's start, serde_yaml one there and at the start of some lines, PyYAML one there) and
	// read it elsewhere as text: all three refuse it. The operator writes it only escaped.
	if strings.ContainsRune(text, '\ufeff') {
		return nil, errors.New(`the text holds a byte order mark (U+FEFF); a name with one is written as the escape "\uFEFF"`)
	}
	decoder := yaml.NewDecoder(strings.NewReader(text))
	var doc, next yaml.Node
	if err := decoder.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	if err := decoder.Decode(&next); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one document")
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	nonSpecific(doc.Content[0], text)
	return doc.Content[0], nil
}

// nonSpecific gives the tag `!` back to the nodes under root that text writes with it (or as
// `!<!>`). yaml.v3 drops that tag and resolves the node as if it had none, so `! {version: 1}`
// would be a config and `version: ! ~` null, where the Rust and Python readers see a local tag.
// The node alone cannot tell: only a tag yaml.v3 keeps sets TaggedStyle. But a node's Line and
// Column are where its properties (anchor, tag) start, so the text from there to the next
// node's start shows whether a tag was written; if so, and TaggedStyle is unset, it was `!`.
func nonSpecific(root *yaml.Node, text string) {
	if !strings.Contains(text, "!") {
		return
	}
	nodes := inTextOrder(root)
	starts := offsets(nodes, text)
	for i, node := range nodes {
		// A block mapping starts where its first key does, and a missing value where the next
		// node does: a tag at a position two nodes share is the later node's.
		end := len(text)
		if i+1 < len(nodes) {
			end = starts[i+1]
		}
		if node.Kind != yaml.AliasNode && node.Style&yaml.TaggedStyle == 0 && tagged(text[starts[i]:end], node.Anchor) {
			node.Tag = "!"
			node.Style |= yaml.TaggedStyle
		}
	}
}

// inTextOrder is root and the nodes under it (aliases not followed) by their position in the
// text; nodes at the same position in the order yaml.v3 read them.
func inTextOrder(root *yaml.Node) []*yaml.Node {
	nodes := []*yaml.Node{}
	var walk func(node *yaml.Node)
	walk = func(node *yaml.Node) {
		nodes = append(nodes, node)
		for _, child := range node.Content {
			walk(child)
		}
	}
	walk(root)
	slices.SortStableFunc(nodes, func(a, b *yaml.Node) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	return nodes
}

// offsets are the byte offsets in text of nodes, sorted by position. yaml.v3 counts as libyaml
// does: columns in characters, and a line ends at \n, \r, \r\n, U+0085, U+2028 or U+2029.
func offsets(nodes []*yaml.Node, text string) []int {
	starts := make([]int, len(nodes))
	offset, line, column := 0, 1, 1
	for i, node := range nodes {
		for (line < node.Line || line == node.Line && column < node.Column) && offset < len(text) {
			r, size := utf8.DecodeRuneInString(text[offset:])
			offset += size
			switch {
			case r == '\r' && strings.HasPrefix(text[offset:], "\n"):
				offset++
				line, column = line+1, 1
			case strings.ContainsRune(lineBreaks, r):
				line, column = line+1, 1
			default:
				column++
			}
		}
		starts[i] = offset
	}
	return starts
}

const lineBreaks = "\n\r\u0085\u2028\u2029"

// tagged is whether props, the text from a node's start to the next node's, starts with a tag,
// or with the node's anchor and then a tag (the two come in either order).
func tagged(props, anchor string) bool {
	if rest, found := strings.CutPrefix(props, "&"+anchor); found && anchor != "" {
		props = separation(rest)
	}
	return strings.HasPrefix(props, "!")
}

// separation is text after the blanks, line breaks and comments that may part two properties.
func separation(text string) string {
	for {
		text = strings.TrimLeft(text, " \t"+lineBreaks)
		if !strings.HasPrefix(text, "#") {
			return text
		}
		end := strings.IndexAny(text, lineBreaks)
		if end < 0 {
			return ""
		}
		text = text[end:]
	}
}

// resolved is node, or the node it is an alias of.
func resolved(node *yaml.Node) *yaml.Node {
	for node != nil && node.Kind == yaml.AliasNode {
		node = node.Alias
	}
	return node
}

func explicitTag(node *yaml.Node) string {
	if node.Style&yaml.TaggedStyle == 0 {
		return ""
	}
	return node.Tag
}

// localTag is whether node carries a tag of one `!` (`!foo`, `!`), not a core one (`!!int`).
func localTag(node *yaml.Node) bool {
	tag := explicitTag(node)
	return strings.HasPrefix(tag, "!") && !strings.HasPrefix(tag, "!!")
}

func isPlain(node *yaml.Node) bool {
	return node.Kind == yaml.ScalarNode && node.Style&quotedOrBlock == 0
}

// isNull is whether an optional value is absent: a plain null, untagged or tagged !!null.
func isNull(node *yaml.Node, path string) (bool, error) {
	if node == nil {
		return true, nil
	}
	if !isPlain(node) {
		return false, nil
	}
	nullWord := node.Value == "null" || node.Value == "Null" || node.Value == "NULL" || node.Value == "~"
	switch explicitTag(node) {
	case "!!null":
		if !nullWord {
			return false, fmt.Errorf("%s: %q tagged !!null is not null", path, node.Value)
		}
		return true, nil
	case "":
		return nullWord || node.Value == "", nil
	}
	return false, nil
}

// shown is node as an error message names it.
func shown(node *yaml.Node) string {
	switch node.Kind {
	case yaml.ScalarNode:
		if node.Value == "" && isPlain(node) {
			return "nothing"
		}
		if isPlain(node) {
			return node.Value
		}
		return fmt.Sprintf("%q", node.Value)
	case yaml.MappingNode:
		return strings.TrimSpace(explicitTag(node) + " a mapping")
	}
	return strings.TrimSpace(explicitTag(node) + " a list")
}

// version reads an optional version: missing or null reads as 0.
func version(node *yaml.Node, path string) (uint64, error) {
	node = resolved(node)
	if null, err := isNull(node, path); null || err != nil {
		return 0, err
	}
	return whole(node, path)
}

// whole reads a version: an unquoted whole number from 0 to 2^64-1, whatever its tag.
func whole(node *yaml.Node, path string) (uint64, error) {
	node = resolved(node)
	literalInt := node.Style&yaml.LiteralStyle != 0 && explicitTag(node) == "!!int"
	if node.Kind == yaml.ScalarNode && (isPlain(node) || literalInt) {
		if value, ok := integer(node.Value); ok {
			return value, nil
		}
	}
	return 0, fmt.Errorf("%s: expected an unquoted whole number from 0 to 2^64-1, found %s", path, shown(node))
}

// integer reads an integer as YAML 1.2's core schema writes one: decimal without leading zeros,
// or 0x, 0o, 0b; an optional `+`; from 0 to 2^64-1.
func integer(text string) (uint64, bool) {
	unsigned := strings.TrimPrefix(text, "+")
	for _, radix := range []struct {
		prefix string
		base   int
	}{{"0x", 16}, {"0o", 8}, {"0b", 2}} {
		rest, found := strings.CutPrefix(unsigned, radix.prefix)
		if !found {
			continue
		}
		if strings.HasPrefix(rest, "+") || strings.HasPrefix(rest, "-") {
			return 0, false
		}
		if value, ok := digits(rest, radix.base); ok {
			return value, true
		}
	}
	if strings.HasPrefix(unsigned, "+") || strings.HasPrefix(unsigned, "-") || leadingZero(text) {
		return 0, false
	}
	return digits(unsigned, 10)
}

// digits is the value of text, digits of base only (no sign, no `_`), below 2^64.
func digits(text string, base int) (uint64, bool) {
	if text == "" || strings.ContainsAny(text, "+-_") {
		return 0, false
	}
	value, ok := new(big.Int).SetString(text, base)
	if !ok || !value.IsUint64() {
		return 0, false
	}
	return value.Uint64(), true
}

// leadingZero is whether text is digits after a leading zero (`007`, `-01`): YAML 1.2 reads
// that as a string, not a number.
func leadingZero(text string) bool {
	if strings.HasPrefix(text, "+") || strings.HasPrefix(text, "-") {
		text = text[1:]
	}
	if len(text) < 2 || text[0] != '0' {
		return false
	}
	return strings.Trim(text, "0123456789") == ""
}

// name reads a pod or job name: any scalar's text, as written (`1` is the job "1").
func name(node *yaml.Node, path string) (string, error) {
	node = resolved(node)
	if node.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("%s: expected a name, found %s", path, shown(node))
	}
	return node.Value, nil
}

// items are the children of an optional mapping or list; none when it is null or an empty
// plain scalar. A tag on a mapping or list is ignored.
func items(node *yaml.Node, path string, kind yaml.Kind) ([]*yaml.Node, error) {
	node = resolved(node)
	if null, err := isNull(node, path); null || err != nil {
		return nil, err
	}
	if isPlain(node) && node.Value == "" {
		return nil, nil
	}
	if node.Kind == kind {
		return node.Content, nil
	}
	expected := "a list"
	if kind == yaml.MappingNode {
		expected = "a mapping"
	}
	return nil, fmt.Errorf("%s: expected %s, found %s", path, expected, shown(node))
}

// eachPair calls f with each key's name and value of an optional mapping, in order.
func eachPair(node *yaml.Node, path string, f func(key string, value *yaml.Node) error) error {
	pairs, err := items(node, path, yaml.MappingNode)
	if err != nil {
		return err
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		key, err := name(pairs[i], path+" key")
		if err != nil {
			return err
		}
		if err := f(key, pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// structFields are the known fields of a mapping, each given once; others are ignored.
func structFields(node *yaml.Node, path string, known ...string) (map[string]*yaml.Node, error) {
	fields := map[string]*yaml.Node{}
	err := eachPair(node, path, func(key string, value *yaml.Node) error {
		for _, field := range known {
			if key != field {
				continue
			}
			if _, seen := fields[key]; seen {
				return fmt.Errorf("%s: duplicate field %s", path, key)
			}
			fields[key] = value
		}
		return nil
	})
	return fields, err
}

// names reads an optional list of names.
func names(node *yaml.Node, path string) ([]string, error) {
	list, err := items(node, path, yaml.SequenceNode)
	if err != nil {
		return nil, err
	}
	read := make([]string, 0, len(list))
	for i, item := range list {
		job, err := name(item, fmt.Sprintf("%s[%d]", path, i))
		if err != nil {
			return nil, err
		}
		read = append(read, job)
	}
	return read, nil
}
