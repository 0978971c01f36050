package systemtest

import (
	"path/filepath"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
)

// EverySaver returns a constructor for each saver the end-to-end tests run
// on, by name: the in-memory saver and a SQLite file in the test's temp
// directory, closed when the test ends. A constructor fails the test
// (t.Fatal) when the file cannot be opened.
func EverySaver() map[string]func(t *testing.T) checkpoint.Saver {
	return map[string]func(t *testing.T) checkpoint.Saver{
		"memory": func(t *testing.T) checkpoint.Saver { return checkpoint.NewMemorySaver(nil) },
		"sqlite": func(t *testing.T) checkpoint.Saver {
			s, err := sqlite.Open(filepath.Join(t.TempDir(), "lockstep.db"), sqlite.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
}
