// Command refund runs lockstep's refund-desk example on a SQLite file,
// offline, and tells what happens: two reviewers approve one refund at
// once and it is paid once, across a crash and restart; a second refund
// request nobody decides expires, and the agent explains it to the
// customer. See package refunds.
//
//	go run ./examples/refund [--db PATH]
//
// --db names the database file (default ./lockstep.db, the lockstep CLI's
// default). Running it again on the same file pays nothing twice.
package main
