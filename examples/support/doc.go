// Command support runs lockstep's support-desk example on a SQLite file,
// offline, and tells what happens: "find the login ticket and close it";
// the search runs once and its repeat is a cache hit; the close waits for a
// support lead's approval and, approved, closes the ticket once. See
// package helpdesk.
//
//	go run ./examples/support [--db PATH]
//
// --db names the database file (default ./lockstep.db, the lockstep CLI's
// default). Running it again on the same file closes nothing twice.
package main
