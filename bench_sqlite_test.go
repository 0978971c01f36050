package lockstep_test

import "testing"

// sqliteSavers lists the SQLite savers benchmarks run on. It is empty until
// the SQLite saver lands.
func sqliteSavers() []benchSaver { return nil }

var _ = testing.Short
