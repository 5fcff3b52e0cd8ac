package apitype

import (
	"bytes"
	"encoding/json"
)

// Nullable is a field that can be absent, JSON null, or a value — three
// states a pointer cannot tell apart. It is used where null means something
// different from absent: [HealthCheck.Path] (null is a TCP probe, absent is
// the default "/") and the clearing fields of [TokenPatch].
//
// Tag such fields `json:",omitzero"` so that the absent state is omitted.
type Nullable[T any] struct {
	// Value is the value when one is set; nil when absent or null.
	Value *T
	// Null reports an explicit JSON null. It is only meaningful when Value
	// is nil.
	Null bool
}

// Some returns a Nullable holding v.
func Some[T any](v T) Nullable[T] { return Nullable[T]{Value: &v} }

// NullValue returns a Nullable that encodes as JSON null.
func NullValue[T any]() Nullable[T] { return Nullable[T]{Null: true} }

// IsZero reports the absent state, which omitzero omits.
func (n Nullable[T]) IsZero() bool { return n.Value == nil && !n.Null }

// IsNull reports an explicit null.
func (n Nullable[T]) IsNull() bool { return n.Value == nil && n.Null }

// Get returns the value and whether one is set.
func (n Nullable[T]) Get() (T, bool) {
	if n.Value == nil {
		var zero T
		return zero, false
	}
	return *n.Value, true
}

// MarshalJSON encodes the value, or null when there is none.
func (n Nullable[T]) MarshalJSON() ([]byte, error) {
	if n.Value == nil {
		return []byte("null"), nil
	}
	return json.Marshal(*n.Value)
}

// UnmarshalJSON records null or decodes a value. encoding/json calls it
// only for a key that is present, so a field left untouched stays absent.
func (n *Nullable[T]) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*n = Nullable[T]{Null: true}
		return nil
	}
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*n = Nullable[T]{Value: &v}
	return nil
}
