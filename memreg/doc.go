// Package memreg will hold protection domains and registered memory regions:
// random 64-bit rkeys bound to a domain and access rights, revoked on
// deregistration, with bounds and permission checks on region offsets and the
// placement copy.
//
// Not built yet: this package has no code.
package memreg
