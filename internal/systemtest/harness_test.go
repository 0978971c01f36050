package systemtest_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/internal/systemtest"
)

// TestRunChild: a child started by Command runs the role its package's
// TestMain knows and exits with the role's status, and a role it does not
// know exits 2 saying which roles there are, so that a child spawned in
// the wrong package fails loudly instead of running the package's tests.
func TestRunChild(t *testing.T) {
	for _, tc := range []struct {
		role       string
		wantStatus int
		wantStderr string
	}{
		{"exit-7", 7, ""},
		{"no-such-role", 2, `LOCKSTEP_CHILD="no-such-role": this test binary has no such role (it has: exit-7)`},
	} {
		t.Run(tc.role, func(t *testing.T) {
			cmd := systemtest.Command(context.Background(), tc.role)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.wantStatus {
				t.Fatalf("child in role %q: %v, want exit status %d (stderr: %s)", tc.role, err, tc.wantStatus, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantStderr) {
				t.Errorf("stderr %q, want it to hold %q", stderr.String(), tc.wantStderr)
			}
		})
	}
}

// fatalTB records the test's Fatalf instead of ending it.
type fatalTB struct {
	testing.TB
	fatal string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) { f.fatal = fmt.Sprintf(format, args...) }

// TestSeed: the seed comes from the environment variable when it is set
// (the replay of a printed seed), is drawn below 2^63 otherwise, and a
// value that is not a number fails the test naming the variable.
func TestSeed(t *testing.T) {
	const env = "LOCKSTEP_SYSTEMTEST_SEED"
	t.Setenv(env, "")
	if s := systemtest.Seed(t, env); s >= 1<<63 {
		t.Errorf("drawn seed %d, want one below 2^63", s)
	}
	t.Setenv(env, "18446744073709551615")
	if s := systemtest.Seed(t, env); s != 18446744073709551615 {
		t.Errorf("seed %d, want the variable's 18446744073709551615", s)
	}
	t.Setenv(env, "12x")
	tb := &fatalTB{TB: t}
	systemtest.Seed(tb, env)
	if !strings.Contains(tb.fatal, env+`="12x"`) {
		t.Errorf("a seed that is not a number: Fatalf %q, want it to name %s=\"12x\"", tb.fatal, env)
	}
}
