// Package archtest holds tests that pin berth's architecture: the import
// layering between packages, and that every package documents itself. It has
// no code of its own.
package archtest
