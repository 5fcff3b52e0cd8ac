package plugin

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/berth-dev/berth/internal/web"
)

// schema is a compiled JSON Schema of a plugin's config.
type schema struct{ s *jsonschema.Schema }

// noLoader refuses every reference out of a schema: plugins' schemas are
// compiled in and complete, and compiling one reads no file or URL.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("a plugin's schema may not reference %s", url)
}

// compile compiles raw, a plugin's schema; name places it in errors.
func compile(name string, raw []byte) (*schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("plugin: %s: %w", name, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	loc := "berth:/plugins/" + name + ".json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("plugin: %s: %w", name, err)
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("plugin: %s: %w", name, err)
	}
	return &schema{s}, nil
}

var printer = message.NewPrinter(language.English)

// check validates the JSON document raw, the value of the request field
// field ("config"): a failure is a 400 naming the path of the failing value
// inside it ("config.retention.days: ...").
func (s *schema) check(field string, raw []byte) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return web.Invalid(field, "not valid JSON: %v", err)
	}
	err = s.s.Validate(doc)
	var ve *jsonschema.ValidationError
	if err == nil {
		return nil
	} else if !errors.As(err, &ve) {
		return web.Invalid(field, "%v", err)
	}
	leaf := firstLeaf(ve)
	path := append([]string{field}, leaf.InstanceLocation...)
	if ap, ok := leaf.ErrorKind.(*kind.AdditionalProperties); ok && len(ap.Properties) > 0 {
		// Name the key itself, as the admin API names an unknown field.
		return web.Invalid(strings.Join(append(path, ap.Properties[0]), "."), "unknown field")
	}
	return web.Invalid(strings.Join(path, "."), "%s", leaf.ErrorKind.LocalizedString(printer))
}

// firstLeaf is the first of e's innermost causes: the failure of one
// keyword at one value, rather than "doesn't validate with ...".
func firstLeaf(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(e.Causes) > 0 {
		e = e.Causes[0]
	}
	return e
}
