// Package faultdb is a fault-injecting database/sql driver for tests
// (docs/reliability.md H1). It wraps any driver.Driver and, on a schedule the
// test arms, fails the Nth Begin, Exec, Query or Commit before or after the
// real operation, adds latency, or runs an action (such as killing the
// process) at that point. The errors it returns are whatever the test hands
// it, typically real driver error values such as
// sqlite3.Error{Code: sqlite3.ErrIoErr}, so the code under test classifies
// them exactly as it would classify the real thing.
//
// Operations are counted per kind. A transaction begun or ended with SQL
// text ("BEGIN IMMEDIATE", "COMMIT", "END", "ROLLBACK") counts as a Begin,
// Commit or Rollback, exactly like one begun through driver.ConnBeginTx, so
// code that runs explicit transaction statements on a dedicated connection
// is covered too.
//
// A Driver holds no global state: register it under a name of your own with
// sql.Register (only from tests), or use it as a driver.Connector source via
// OpenConnector and sql.OpenDB. It is safe for concurrent use.
package faultdb
