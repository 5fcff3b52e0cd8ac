package web

import "net/http"

// Bounds on the shape of a JSON request body, besides MaxBody: within 2 MiB
// a body of nothing but empty objects holds 700,000 values, each of which
// costs far more decoded (and stored, and listed) than its bytes.
const (
	// MaxJSONDepth is how deeply arrays and objects may nest.
	MaxJSONDepth = 32
	// MaxJSONValues bounds the values in one body: objects, arrays,
	// strings, numbers, booleans and nulls, keys not counted.
	MaxJSONValues = 10000
	// MaxJSONKeys bounds the keys of one object.
	MaxJSONKeys = 1000
)

// CheckJSONShape refuses (400) a body that nests deeper than MaxJSONDepth,
// holds more than MaxJSONValues values, or has an object with more than
// MaxJSONKeys keys. It is one pass over the bytes, allocating only the
// container stack, and runs before any decoding; it does not validate the
// syntax, which the decoder does after it.
func CheckJSONShape(raw []byte) error {
	type container struct {
		object bool
		keys   int
	}
	var (
		stack      []container
		values     int
		afterColon bool // in an object: the next string is a value, not a key
		inScalar   bool // inside a number or literal
	)
	value := func() error {
		values++
		if values > MaxJSONValues {
			return Errorf(http.StatusBadRequest, "the JSON body holds more than %d values", MaxJSONValues)
		}
		return nil
	}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch c {
		case '{', '[':
			inScalar = false
			if err := value(); err != nil {
				return err
			}
			if len(stack) == MaxJSONDepth {
				return Errorf(http.StatusBadRequest, "the JSON body nests deeper than %d levels", MaxJSONDepth)
			}
			stack = append(stack, container{object: c == '{'})
			afterColon = false
		case '}', ']':
			inScalar = false
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			afterColon = false
		case ':':
			inScalar = false
			afterColon = true
		case ',':
			inScalar = false
			afterColon = false
		case ' ', '\t', '\r', '\n':
			inScalar = false
		case '"':
			inScalar = false
			if n := len(stack); n > 0 && stack[n-1].object && !afterColon {
				stack[n-1].keys++
				if stack[n-1].keys > MaxJSONKeys {
					return Errorf(http.StatusBadRequest, "a JSON object in the body has more than %d keys", MaxJSONKeys)
				}
			} else if err := value(); err != nil {
				return err
			}
			afterColon = false
			// Skip to the closing quote.
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
		default:
			if !inScalar {
				inScalar = true
				afterColon = false
				if err := value(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
