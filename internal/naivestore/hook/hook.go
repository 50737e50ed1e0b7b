// Package hook carries the one unexported switch of package taskstore that
// package naivestore needs: taskstore sets Enable from its init. It is a
// package of its own because taskstore cannot import naivestore, which
// imports taskstore.
package hook

// Enable turns store, a *taskstore.Store fresh from taskstore.New and not
// yet used, into the blind-replay store. Set by package taskstore's init.
var Enable func(store any)
