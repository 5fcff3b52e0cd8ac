// Package computertype holds the JSON types of berth's Computer API
// (/computers on the admin listener): one Go type per request and answer
// body, used by the server (internal/computerapi, and internal/computer
// for what it stores and emits) and by the client (package client's
// Computer* names are aliases of these), so the two cannot drift.
//
// The types that the Computer contract declares
// (shared/contract/computer/dist/fleet/wire.d.ts and host-config.d.ts)
// carry the contract's names: [HostedBacking], [ComputerRuntimeState],
// [ComputerProvenance], [ComputerGrant], [ComputerFact],
// [ComputerUsageInterval] and [HostCapacity]. internal/contracttest parses
// the contract, and the Computer API's contract test checks both these
// structs and the server's live answers against it. The rest are berth's
// own routes' bodies, built from those.
//
// Unlike package apitype (the app-lb admin API, snake_case, seconds), keys
// are camelCase and times are Unix milliseconds, as in the Computer
// contract; a duration's key names its unit (idleTimeoutSecs, timeoutMs).
// It imports only the standard library.
package computertype
