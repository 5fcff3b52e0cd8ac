package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-dev/berth/apitype"
	"gopkg.in/yaml.v3"
)

var applyCmd = &command{
	name:    "apply",
	summary: "Register or replace deployments from a JSON or YAML file",
	help: `Usage: berth apply -f FILE [--dry-run] [--wait [--timeout DUR]]

Register each deployment spec in FILE, replacing any deployment with the
same id. FILE is JSON or YAML and holds one spec, a list of specs, or
several YAML documents separated by "---". "-f -" reads standard input.
A .json file, or content that starts with { or [, must be strict JSON
(no trailing commas or comments); .yaml and .yml files are YAML.

Specs are sent as written: fields this berth does not know are passed to
the server untouched. Every spec is tried; the command fails if any was
refused.

--dry-run sends each spec for the server to check (validation, route
ownership, quota: everything a real apply checks) and stores nothing. A
server that cannot do that is not sent anything.

--wait waits, after applying, until each deployment is ready: a vm
deployment when its desired replicas are ready (one that scales from zero
is ready once stored), any other kind once stored. Progress goes to
standard error, one updating line on a terminal; if --timeout passes
first, the command fails with the deployment's last create error.

Flags:
  -f FILE          the file to apply, or - for standard input (required)
  --dry-run        validate on the server; store nothing
  --wait           wait until the deployments are ready
  --timeout DUR    how long --wait waits, such as 90s or 10m (default 5m)
`,
	run: runApply,
}

func runApply(ctx context.Context, e *env, args []string) error {
	fs := e.flagSet("apply")
	var file string
	fs.StringVar(&file, "f", "", "")
	fs.StringVar(&file, "filename", "", "")
	dryRun := fs.Bool("dry-run", false, "")
	wait := fs.Bool("wait", false, "")
	timeout := fs.Duration("timeout", defaultWaitTimeout, "")
	if err := e.parseNone(fs, args); err != nil {
		return err
	}
	if file == "" {
		return usagef("-f FILE is required")
	}
	if *dryRun && *wait {
		return usagef("--dry-run stores nothing, so there is nothing to --wait for")
	}
	if *timeout <= 0 {
		return usagef("--timeout must be positive, got %v", *timeout)
	}
	data, err := e.readInput(file)
	if err != nil {
		return err
	}
	specs, err := splitSpecs(file, data)
	if err != nil {
		return fmt.Errorf("%s: %w", displayName(file), err)
	}
	if len(specs) == 0 {
		return fmt.Errorf("%s: no deployment specs", displayName(file))
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	path, done := "/deployments", "applied"
	if *dryRun {
		if err := canDryRun(ctx, c); err != nil {
			return err
		}
		path, done = "/deployments?dry_run=true", "checked (server dry run; nothing stored)"
	}

	var replies []json.RawMessage
	var applied []string
	failed := false
	for _, spec := range specs {
		id := specID(spec)
		var raw json.RawMessage
		h, err := c.Do(ctx, "POST", path, spec, &raw)
		if err == nil && *dryRun && h.Get(dryRunHeader) != "true" {
			// Asked first, so only a server changed meanwhile gets here.
			fmt.Fprintf(e.stderr, "error: deployment/%s: the server did not do a dry run: it may have APPLIED the spec\n", id)
			return errReported
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "error: deployment/%s: %s\n", id, e.explain(err))
			failed = true
			if ctx.Err() != nil {
				break
			}
			continue
		}
		var st apitype.DeploymentStatus
		if json.Unmarshal(raw, &st) == nil && st.Spec.ID != "" {
			id = st.Spec.ID // the server may have normalised it
		}
		applied = append(applied, id)
		if e.structured() {
			replies = append(replies, raw)
			continue
		}
		fmt.Fprintf(e.stdout, "deployment/%s %s\n", id, done)
	}
	if len(replies) > 0 {
		if err := e.printDocs("deployment", replies, len(replies) > 1); err != nil {
			return err
		}
	}
	if failed {
		return errReported
	}
	if *wait {
		return e.waitReady(ctx, c, applied, *timeout)
	}
	return nil
}

func displayName(file string) string {
	if file == "-" {
		return "stdin"
	}
	return file
}

// readInput reads a file, or stdin for "-", refusing anything larger than
// maxFileSize: a spec is kilobytes, and a mistaken `-f /dev/zero` must not
// eat memory.
func (e *env) readInput(file string) ([]byte, error) {
	var r io.Reader = e.stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", displayName(file), err)
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("%s is larger than %d MiB", displayName(file), maxFileSize>>20)
	}
	return b, nil
}

// specID returns a spec's "id" for messages, or "?" when it has none.
func specID(spec json.RawMessage) string {
	var v struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(spec, &v) != nil {
		return "?"
	}
	if s, ok := v.ID.(string); ok && s != "" {
		return s
	}
	return "?"
}

// splitSpecs turns the contents of an apply file into one JSON object per
// deployment spec.
//
// A file named *.json is JSON, and so is one whose content starts with {
// or [ (stdin, or a name that says neither): it is read as a stream of
// values, each an object or an array of objects, kept byte for byte, and
// what is not JSON (a trailing comma, a comment) is refused with JSON's
// error and its line and column. A file named *.yaml or *.yml, and any
// other content, is YAML, one document at a time.
func splitSpecs(name string, data []byte) ([]json.RawMessage, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 BOM
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("empty file")
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".json":
		return splitJSON(data)
	case ".yaml", ".yml":
		return splitYAML(data)
	}
	if trimmed[0] == '{' || trimmed[0] == '[' {
		return splitJSON(data)
	}
	return splitYAML(data)
}

func splitJSON(data []byte) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var specs []json.RawMessage
	for n := 1; ; n++ {
		var v json.RawMessage
		if err := dec.Decode(&v); err == io.EOF {
			return specs, nil
		} else if err != nil {
			return nil, jsonSyntax(data, err)
		}
		got, err := specsOf(v, n)
		if err != nil {
			return nil, err
		}
		specs = append(specs, got...)
	}
}

// jsonSyntax words a JSON decoding error with the line and column it was
// found at.
func jsonSyntax(data []byte, err error) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		line, col := lineCol(data, se.Offset)
		return fmt.Errorf("invalid JSON at line %d, column %d: %w", line, col, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		line, col := lineCol(data, int64(len(bytes.TrimRight(data, " \t\r\n"))))
		return fmt.Errorf("invalid JSON at line %d, column %d: unexpected end of input", line, col)
	}
	return fmt.Errorf("invalid JSON: %w", err)
}

// lineCol turns a byte offset into a 1-based line and column, the offset
// being just past the byte where the decoder stopped (json.SyntaxError).
func lineCol(data []byte, off int64) (line, col int) {
	off = min(max(off, 1), int64(len(data)))
	before := data[:off-1]
	line = bytes.Count(before, []byte("\n")) + 1
	col = len(before) - bytes.LastIndexByte(before, '\n')
	return line, col
}

// specsOf splits one JSON document into specs: itself if it is an object,
// its elements if it is an array of objects.
func specsOf(doc json.RawMessage, n int) ([]json.RawMessage, error) {
	doc = bytes.TrimSpace(doc)
	switch doc[0] {
	case '{':
		return []json.RawMessage{doc}, nil
	case '[':
		var list []json.RawMessage
		if err := json.Unmarshal(doc, &list); err != nil {
			return nil, err
		}
		for i, item := range list {
			item = bytes.TrimSpace(item)
			if len(item) == 0 || item[0] != '{' {
				return nil, fmt.Errorf("document %d, item %d: a deployment spec must be an object", n, i+1)
			}
			list[i] = item
		}
		return list, nil
	}
	return nil, fmt.Errorf("document %d: want a deployment spec (an object) or a list of them", n)
}

func splitYAML(data []byte) ([]json.RawMessage, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var specs []json.RawMessage
	for n := 1; ; n++ {
		var v any
		if err := dec.Decode(&v); err == io.EOF {
			return specs, nil
		} else if err != nil {
			return nil, fmt.Errorf("invalid YAML: %w", err)
		}
		if v == nil {
			continue // an empty document, such as after a trailing ---
		}
		jv, err := jsonValue(v, "")
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // keep <, > and & readable in what the server stores
		if err := enc.Encode(jv); err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		got, err := specsOf(b.Bytes(), n)
		if err != nil {
			return nil, err
		}
		specs = append(specs, got...)
	}
}

// jsonValue converts a value decoded from YAML into one encoding/json
// writes as the same JSON value. path names the value in errors.
//
// YAML allows what JSON cannot say, and those are refused rather than
// guessed at: mapping keys that are not strings (`8080: x` is an integer
// key; quote it), and infinite or NaN floats. Timestamps, which yaml.v3
// decodes as time.Time, go back to text.
func jsonValue(v any, path string) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			jx, err := jsonValue(x, join(path, k))
			if err != nil {
				return nil, err
			}
			v[k] = jx
		}
		return v, nil
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, x := range v {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("%s: key %v is a %T, not a string (quote it)", orTop(path), k, k)
			}
			jx, err := jsonValue(x, join(path, ks))
			if err != nil {
				return nil, err
			}
			m[ks] = jx
		}
		return m, nil
	case []any:
		for i, x := range v {
			jx, err := jsonValue(x, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			v[i] = jx
		}
		return v, nil
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, fmt.Errorf("%s: %v cannot be written as JSON", orTop(path), v)
		}
		return v, nil
	case time.Time:
		if v.Equal(v.Truncate(24*time.Hour)) && v.Location() == time.UTC {
			return v.Format(time.DateOnly), nil
		}
		return v.Format(time.RFC3339Nano), nil
	}
	return v, nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orTop(path string) string {
	if path == "" {
		return "top level"
	}
	return path
}
