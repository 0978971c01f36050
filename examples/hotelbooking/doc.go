// Command hotelbooking runs lockstep's hotel-booking example on a SQLite
// file, offline, and tells what happens: a compliance node holds a request
// that looks like SQL injection, a reviewer corrects it and the agent books
// once; a second booking, above the price limit, waits for an approval
// that you give with the lockstep CLI. See package booking.
//
//	go run ./examples/hotelbooking             # both stories; one waits for you
//	go install ./cmd/lockstep                  # the CLI, once (its exit codes are lost under go run)
//	lockstep approvals                         # the pending approval
//	lockstep approve ID --reviewer you         # approve it
//	go run ./examples/hotelbooking --resume    # the worker resumes it: booked once
//
// Flags:
//
//	--db PATH   the database file (default ./lockstep.db, the CLI's default)
//	--resume    only resume the decided approvals of this example's threads
package main
