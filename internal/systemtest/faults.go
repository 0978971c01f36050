package systemtest

import (
	"database/sql"
	"sync"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/lockstepgo/lockstep/internal/faultdb"
)

// faultLayers are the fault drivers registered in this process, by name:
// database/sql's registry is the process's, so they are too.
var (
	faultMu     sync.Mutex
	faultLayers = map[string][2]*faultdb.Driver{}
)

// FaultDrivers registers, once per process and name, a database/sql
// driver called name that opens SQLite through two faultdb layers: before
// fails operations before they run, after fails them after they took
// effect (so a commit can be applied and still report an error). It
// returns the two layers as they are; a test arms them with their rules
// and clears them with Reset. Open a saver through it with
// sqlite.Config.DriverName.
func FaultDrivers(name string) (before, after *faultdb.Driver) {
	faultMu.Lock()
	defer faultMu.Unlock()
	if l, ok := faultLayers[name]; ok {
		return l[0], l[1]
	}
	before = faultdb.New(&sqlite3.SQLiteDriver{})
	after = faultdb.New(before)
	sql.Register(name, after)
	faultLayers[name] = [2]*faultdb.Driver{before, after}
	return before, after
}
