package systemtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"

	"github.com/lockstepgo/lockstep/internal/crashtest"
)

// EnvChild names the role a test binary plays when it is re-run as a
// child process of one of its own tests. A package's TestMain passes its
// roles to [RunChild] before anything else.
const EnvChild = "LOCKSTEP_CHILD"

// RunChild runs the role [EnvChild] names, if it is set, and exits the
// process with the role's status; it returns at once when the variable is
// unset (the binary runs its tests). A role the package does not know exits
// with status 2 and says which roles it has.
func RunChild(roles map[string]func() int) {
	role := os.Getenv(EnvChild)
	if role == "" {
		return
	}
	run, ok := roles[role]
	if !ok {
		known := make([]string, 0, len(roles))
		for r := range roles {
			known = append(known, r)
		}
		sort.Strings(known)
		fmt.Fprintf(os.Stderr, "%s=%q: this test binary has no such role (it has: %s)\n", EnvChild, role, strings.Join(known, ", "))
		os.Exit(2)
	}
	os.Exit(run())
}

// Command returns the command that re-runs this test binary as a child in
// role: [EnvChild] set to role and env added to this process's
// environment, and no test run (-test.run=^$), so that the child's
// TestMain hands it to [RunChild]. ctx ends the child as
// exec.CommandContext does.
func Command(ctx context.Context, role string, env ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), EnvChild+"="+role), env...)
	return cmd
}

// ChildConfig reads a crash child's plan and generation
// (crashtest.ChildFromEnv) and decodes into cfg the JSON configuration its
// parent put in the environment variable env. It returns the first error,
// naming env when the configuration is the problem.
func ChildConfig(env string, cfg any) (crashtest.Child, error) {
	ch, err := crashtest.ChildFromEnv()
	if err != nil {
		return crashtest.Child{}, err
	}
	if err := json.Unmarshal([]byte(os.Getenv(env)), cfg); err != nil {
		return crashtest.Child{}, fmt.Errorf("%s: %w", env, err)
	}
	return ch, nil
}
