// Package apitype holds the JSON types of berth's admin API: one Go type for
// every interface and type alias in the admin API contract
// (shared/contract/hws/dist/types.d.ts, the declarations app-lb's clients are
// built from), with the same names and the same JSON keys, plus the error
// envelope ([Error]) and the request bodies app-lb documents but the
// contract does not declare (requests.go).
//
// The contract is the authority. contract_test.go parses it and fails when a
// type or field here is missing, extra, or differs in optionality, so this
// package cannot drift from it silently. It imports only the standard
// library, so that clients can use it without pulling in the server.
//
// # Conventions
//
//   - Keys are snake_case, as the contract spells them; the one camelCase
//     type, [DiscoveryStatus], is so on the wire too.
//   - Timestamps are unix seconds unless the key ends in _ms (epoch
//     milliseconds), or the field says otherwise ([SecurityAlert.Ts] and the
//     Obs* types' T and Ts are milliseconds; [CertStatus.NotAfter] and
//     [HostSandboxView.CreatedAt] are date strings). Durations are in the
//     unit their key names (_secs, _s, _ms).
//   - Integers are int64 for timestamps, byte counts and numeric ids, int for
//     other counts, and float64 where the value is fractional (percentages,
//     rates, histogram statistics and bucket bounds, and every measure of an
//     [ObsMetricBucket], which is an average over its bucket).
//   - A field the contract marks optional (`?`) is omitted when absent:
//     strings, slices and maps with omitempty, and numbers, booleans and
//     nested objects as pointers, because their zero value is meaningful.
//     A field typed `T | null` is a pointer without omitempty, so it encodes
//     as null. Where absent and null mean different things, the field is a
//     [Nullable] ([HealthCheck.Path]).
//   - String-literal unions are typed strings with constants. Decoding does
//     not reject values outside the constants: a newer server may send them.
//   - `unknown` is [encoding/json.RawMessage], carried through unread.
//   - Interfaces with an index signature (`[extra: string]: unknown`) have an
//     Extra map holding every key the contract does not name. Decoding fills
//     it and encoding writes it back after the declared fields, so a document
//     from a newer peer survives a decode→encode round trip with the same
//     JSON value. Declared fields win over Extra keys of the same name.
//     This matters most for [DeploymentSpec]: a spec written by a newer
//     client must not lose fields when berth stores and returns it. Objects
//     without an index signature drop unknown keys, as the contract allows.
//
// # Contract version
//
// The types follow the types.d.ts in shared/contract at the time of writing
// (99 exported declarations). When the contract changes, contract_test.go
// names every difference; update this package to match.
package apitype
