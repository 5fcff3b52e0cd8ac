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
func (e *env) fetchAndPrint(ctx context.Context, c *client.Client, method, path string, body, out any) error {
	var raw json.RawMessage
	if _, err := c.Do(ctx, method, path, body, &raw); err != nil {
		return err
	}
	if err := e.printDocs([]json.RawMessage{raw}, false); err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("unexpected reply to %s %s: %w", method, path, err)
		}
	}
	return nil
}

// printDocs prints JSON documents in the -o format. With asList, several
// documents print as one JSON array or as a YAML stream; without it there
// must be exactly one.
func (e *env) printDocs(docs []json.RawMessage, asList bool) error {
	var b bytes.Buffer
	switch e.output {
	case "yaml":
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
		doc := docs[0]
		if asList {
			doc = json.RawMessage("[" + string(bytes.Join(toBytes(docs), []byte(","))) + "]")
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
