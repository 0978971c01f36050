package pgtest_test

import (
	"regexp"
	"testing"

	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSchemaName: a prefix and 12 hex digits, different every call.
func TestSchemaName(t *testing.T) {
	a, b := pgtest.SchemaName("t_"), pgtest.SchemaName("t_")
	if !regexp.MustCompile(`^t_[0-9a-f]{12}$`).MatchString(a) || a == b {
		t.Errorf("SchemaName: %q and %q, want t_ and 12 hex digits, each new", a, b)
	}
}
