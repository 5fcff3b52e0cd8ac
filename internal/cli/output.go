package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/berth-dev/berth/client"
	"gopkg.in/yaml.v3"
)

// fetchAndPrint sends one request and prints the reply exactly as the
// server sent it, in the -o format. It goes through client.Do rather than
// the typed methods because decoding into apitype and encoding again would
// drop fields this build does not know and reorder the rest; -o json is
// for scripts, which should see what the server said. When out is not nil
// the reply is also decoded into it, for a command that needs to act on it.
// For -o name the resource kind comes from the path: /deployments[/ID]
// prints deployment/ID lines, a sub-resource path has no name to print.
func (e *env) fetchAndPrint(ctx context.Context, c *client.Client, method, path string, body, out any) error {
	if err := e.canPrint(pathKind(path)); err != nil {
		return err
	}
	var raw json.RawMessage
	if _, err := c.Do(ctx, method, path, body, &raw); err != nil {
		return err
	}
	if err := e.printDocs(pathKind(path), []json.RawMessage{raw}, false); err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("unexpected reply to %s %s: %w", method, path, err)
		}
	}
	return nil
}

// printItem prints, in the -o format, the list at path (the reply, or its
// listKey field), or with id only its element whose key field is id, as
// the server sent it.
func (e *env) printItem(ctx context.Context, c *client.Client, path, listKey, kind, key, id string) error {
	if id == "" {
		return e.fetchAndPrint(ctx, c, "GET", path, nil, nil)
	}
	item, err := fetchItem(ctx, c, path, listKey, kind, key, id)
	if err != nil {
		return err
	}
	return e.printDocs(kind, []json.RawMessage{item}, false)
}

// fetchItem returns the element of the list at path (or its listKey
// field) whose key field is id, or a "no KIND ID" error.
func fetchItem(ctx context.Context, c *client.Client, path, listKey, kind, key, id string) (json.RawMessage, error) {
	var raw json.RawMessage
	if _, err := c.Do(ctx, "GET", path, nil, &raw); err != nil {
		return nil, err
	}
	if listKey != "" {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, fmt.Errorf("unexpected reply to GET %s: %w", path, err)
		}
		raw = obj[listKey]
	}
	var list []map[string]json.RawMessage
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil || json.Unmarshal(raw, &items) != nil {
		return nil, fmt.Errorf("unexpected reply to GET %s: want a list", path)
	}
	for i, it := range list {
		var v string
		if json.Unmarshal(it[key], &v) == nil && v == id {
			return items[i], nil
		}
	}
	return nil, fmt.Errorf("no %s %q", kind, id)
}

// pathKinds maps an admin API collection to the resource kind -o name
// prints.
var pathKinds = map[string]string{
	"deployments": "deployment", "tokens": "token", "secrets": "secret",
	"namespaces": "namespace", "images": "image", "computers": "computer", "disks": "disk",
}

// pathKind is the resource kind of a collection or item path
// (/deployments, /deployments/web?x=y), "" for anything else.
func pathKind(path string) string {
	p, _, _ := strings.Cut(path, "?")
	segs := strings.Split(strings.Trim(p, "/"), "/")
	if len(segs) > 2 {
		return ""
	}
	return pathKinds[segs[0]]
}

// canPrint refuses -o name, before anything is sent, for output that is
// not a resource (kind "").
func (e *env) canPrint(kind string) error {
	if e.output == "name" && kind == "" {
		return usagef("-o name is for resources (deployments, tokens, secrets, ...); this command's output has no name")
	}
	return nil
}

// printValue prints v, a decoded reply, in the -o format; kind is its
// resource kind for -o name, "" when it is not a resource.
func (e *env) printValue(kind string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.printDocs(kind, []json.RawMessage{raw}, false)
}

// printDocs prints JSON documents in the -o format: the one output path of
// every command's json, yaml and name output. With asList, several
// documents print as one JSON array or as a YAML stream; without it there
// must be exactly one. -o name prints KIND/NAME for each resource in the
// documents (kind "" refuses it).
func (e *env) printDocs(kind string, docs []json.RawMessage, asList bool) error {
	var b bytes.Buffer
	switch e.output {
	case "name":
		if err := e.canPrint(kind); err != nil {
			return err
		}
		for _, d := range docs {
			names, err := docNames(d)
			if err != nil {
				return err
			}
			for _, n := range names {
				b.WriteString(kind + "/" + clean(n) + "\n")
			}
		}
	case "yaml":
		if asList && len(docs) == 0 {
			b.WriteString("[]\n")
		}
		for i, d := range docs {
			if i > 0 {
				b.WriteString("---\n")
			}
			y, err := jsonToYAML(d)
			if err != nil {
				return err
			}
			b.Write(y)
		}
	default: // json
		var doc json.RawMessage
		if asList {
			doc = json.RawMessage("[" + string(bytes.Join(toBytes(docs), []byte(","))) + "]")
		} else {
			doc = docs[0]
		}
		// Indenting changes only whitespace: keys, order and numbers stay
		// as the server wrote them.
		if err := json.Indent(&b, doc, "", "  "); err != nil {
			return fmt.Errorf("server sent invalid JSON: %w", err)
		}
		b.WriteByte('\n')
	}
	_, err := e.stdout.Write(b.Bytes())
	return err
}

// nameKeys are the fields that name a resource, in the order tried: a
// DeploymentStatus's spec.id comes first, then id (tokens, secrets,
// Computers, specs), sandbox_id (VMs, disks, whose name is their owner's),
// name (images), namespace (namespace entries).
var nameKeys = []string{"id", "sandbox_id", "name", "namespace"}

// listKeys are the fields of a reply that hold its resources when the
// reply itself names none (GET /images' {"images": [...]}, get vms'
// {"vms": [...], "pending_vms": [...]}, GET /disks' {"disks": [...]}).
var listKeys = []string{"images", "vms", "pending_vms", "deployments", "items", "disks", "hosts"}

// docNames returns the names of the resources in one JSON document: an
// object names itself, a list each element.
func docNames(doc json.RawMessage) ([]string, error) {
	doc = bytes.TrimSpace(doc)
	if len(doc) > 0 && doc[0] == '[' {
		var list []json.RawMessage
		if err := json.Unmarshal(doc, &list); err != nil {
			return nil, fmt.Errorf("server sent invalid JSON: %w", err)
		}
		var out []string
		for _, d := range list {
			n, err := docNames(d)
			if err != nil {
				return nil, err
			}
			out = append(out, n...)
		}
		return out, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(doc, &obj); err != nil {
		return nil, fmt.Errorf("the reply is not a resource: %w", err)
	}
	if sp, ok := obj["spec"]; ok {
		var s struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(sp, &s) == nil && s.ID != "" {
			return []string{s.ID}, nil
		}
	}
	for _, k := range nameKeys {
		var v string
		if json.Unmarshal(obj[k], &v) == nil && v != "" {
			return []string{v}, nil
		}
	}
	var out []string
	found := false
	for _, k := range listKeys {
		if raw, ok := obj[k]; ok && len(raw) > 0 && raw[0] == '[' {
			found = true
			n, err := docNames(raw)
			if err != nil {
				return nil, err
			}
			out = append(out, n...)
		}
	}
	if !found {
		return nil, errors.New("the reply names no resource, so -o name has nothing to print")
	}
	return out, nil
}

func toBytes(docs []json.RawMessage) [][]byte {
	out := make([][]byte, len(docs))
	for i, d := range docs {
		out[i] = d
	}
	return out
}

// jsonToYAML renders a JSON document as block-style YAML, keeping key order
// and number text, by building a yaml.Node straight from the JSON tokens.
func jsonToYAML(doc []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	n, err := yamlNode(dec)
	if err != nil {
		return nil, fmt.Errorf("converting reply to YAML: %w", err)
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, fmt.Errorf("converting reply to YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// yamlNode reads one JSON value from dec as a yaml.Node.
func yamlNode(dec *json.Decoder) (*yaml.Node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch v := tok.(type) {
	case json.Delim:
		var n *yaml.Node
		switch v {
		case '{':
			n = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		case '[':
			n = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		default:
			return nil, fmt.Errorf("unexpected %v", v)
		}
		for dec.More() {
			if n.Kind == yaml.MappingNode {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, ok := k.(string)
				if !ok {
					return nil, fmt.Errorf("object key %v is not a string", k)
				}
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key})
			}
			child, err := yamlNode(dec)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, child)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v}, nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(string(v), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: string(v)}, nil
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: fmt.Sprint(v)}, nil
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
	}
	return nil, errors.New("unexpected JSON token")
}

// newTable returns a tabwriter laid out like kubectl's tables: columns
// separated by at least three spaces. Call Flush when done.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
}

// row writes one tab-separated table row. Cells are cleaned of control
// characters: a tab or newline in a server-supplied value would break the
// layout, and an escape sequence would reach the terminal.
func row(w io.Writer, cols ...any) {
	for i, c := range cols {
		if i > 0 {
			io.WriteString(w, "\t")
		}
		io.WriteString(w, clean(fmt.Sprint(c)))
	}
	io.WriteString(w, "\n")
}

// clean replaces control characters in s with spaces.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, s)
}
