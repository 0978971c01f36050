// Command supervisor runs lockstep's supervisor example on a SQLite file,
// offline: a supervisor graph whose triage and billing nodes are
// sub-agents (subgraphs); billing's refund waits for a billing lead's
// approval inside its subgraph and, approved, refunds once. See package
// desk.
//
//	go run ./examples/supervisor [--db PATH]
//
// --db names the database file (default ./lockstep.db, the lockstep CLI's
// default). Running it again on the same file refunds nothing twice.
package main
