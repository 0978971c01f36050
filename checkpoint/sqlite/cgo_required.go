//go:build !cgo

package sqlite

// This package is built on github.com/mattn/go-sqlite3, which needs cgo and
// a C compiler. This file compiles only without cgo, so that the build
// fails with a line that says what to do rather than with the driver's
// missing names.
var _ = sqlite_saver_needs_cgo__build_with_CGO_ENABLED_1_and_a_C_compiler
