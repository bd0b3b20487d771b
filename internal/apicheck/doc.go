// Package apicheck holds a test that keeps the public API callable from
// outside the module: no exported identifier of a public package may mention
// a type of an internal package, which a library user cannot import.
package apicheck
