// Command escalation runs lockstep's escalation example on a SQLite file,
// offline, and tells what happens: a slow issue tracker still gets exactly
// one issue (timeout, retry with the same idempotency key, dedupe, ledger),
// and a tracker outage gives the user a degraded answer with the diagnosis
// and the next step. See package escalate.
//
//	go run ./examples/escalation [--db PATH]
//
// --db names the database file (default ./lockstep.db, the lockstep CLI's
// default). Running it again on the same file files nothing twice.
package main
