// Package layering holds the test that keeps the module's import graph as
// docs/architecture.md draws it: every package in one layer, and every
// package importing only packages of the layers below its own.
package layering
