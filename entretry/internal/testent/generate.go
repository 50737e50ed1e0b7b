// Package testent is the ent client generated for entretry's tests from
// ./schema (the chaos harness's tables k and ledger).
//
// Regenerate with go generate, then delete migrate/ and the three lines of
// client.go that use it (the Schema field): the tests create their tables
// themselves, and ent's migrate package would make this module require
// atlas. `go run pkg@version` keeps ent's code generator out of go.mod.
package testent

//go:generate go run entgo.io/ent/cmd/ent@v0.14.5 generate ./schema
